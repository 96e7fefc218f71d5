package cluster

// SilenceEpoch counts this node's silences: it changes whenever the node
// finds it was silent for NodeDownAfter/2 (no contact with a majority of
// the cluster, or its process stalled: the watch did not run that long,
// checked here too, so a goroutine that resumes before the watch sees
// the stall). Something decided in an earlier epoch than the current one
// may have been superseded by the log meanwhile (the node declared down,
// its deliveries requeued to others): it may be carried out only once a
// command proposed after the silence has been applied here and the
// applied state says that it still stands. Epochs never go back.
func (n *Node) SilenceEpoch() uint64 {
	if n.watch == nil {
		return 0
	}
	return n.watch.Epoch()
}
