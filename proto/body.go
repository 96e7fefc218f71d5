package proto

// Body is the message body a command carries, which the state machine
// names by the entry's log index and the command's position in it, and
// whether its kind carries one: Publish, and queue groups' Enqueue and
// HandOff (its message's). package bodies scans the same fields without
// decoding the entry.
func (c *Command) Body() ([]byte, bool) {
	switch x := c.GetCmd().(type) {
	case *Command_Publish:
		return x.Publish.GetBody(), x.Publish != nil
	case *Command_Enqueue:
		return x.Enqueue.GetBody(), x.Enqueue != nil
	case *Command_HandOff:
		return x.HandOff.GetMessage().GetBody(), x.HandOff != nil
	}
	return nil, false
}
