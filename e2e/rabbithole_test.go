package e2e

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	rabbithole "github.com/michaelklishin/rabbit-hole/v2"
	amqp "github.com/rabbitmq/amqp091-go"
)

// TestRabbitHoleThroughFollower drives a three-node cluster with
// rabbit-hole, the Go client of RabbitMQ's management API, through a
// follower's management port: the calls operators and tools make most,
// each decoded into rabbit-hole's types, so a field of the wrong JSON type
// fails here as it would fail them.
func TestRabbitHoleThroughFollower(t *testing.T) {
	skipShort(t)
	c := StartCluster(t, 3)
	f := followerOf(t, c)
	rh, err := rabbithole.NewClient("http://"+f.ManagementAddr, "guest", "guest")
	if err != nil {
		t.Fatal(err)
	}
	must := func(what string, res *http.Response, err error, codes ...int) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if !slices.Contains(codes, res.StatusCode) {
			t.Fatalf("%s: HTTP %d", what, res.StatusCode)
		}
	}
	created := []int{http.StatusCreated, http.StatusNoContent}

	ov, err := rh.Overview()
	if err != nil || ov.Node != f.ID || ov.ManagementVersion == "" {
		t.Fatalf("overview %+v: %v", ov, err)
	}
	nodes, err := rh.ListNodes()
	if err != nil || len(nodes) != 3 {
		t.Fatalf("nodes %+v: %v", nodes, err)
	}
	if n, err := rh.GetNode(f.ID); err != nil || n.Name != f.ID || !n.IsRunning {
		t.Fatalf("node %+v: %v", n, err)
	}
	me, err := rh.Whoami()
	if err != nil || me.Name != "guest" || !slices.Contains(me.Tags, "administrator") {
		t.Fatalf("whoami %+v: %v", me, err)
	}

	res, err := rh.PutVhost("rh", rabbithole.VhostSettings{Description: "rabbit-hole"})
	must("put vhost", res, err, created...)
	vhosts, err := rh.ListVhosts()
	if err != nil || !slices.ContainsFunc(vhosts, func(v rabbithole.VhostInfo) bool { return v.Name == "rh" }) {
		t.Fatalf("vhosts %+v: %v", vhosts, err)
	}
	if v, err := rh.GetVhost("rh"); err != nil || v.Description != "rabbit-hole" {
		t.Fatalf("vhost %+v: %v", v, err)
	}
	res, err = rh.PutUser("rh-user", rabbithole.UserSettings{Password: "s3cret-pass", Tags: rabbithole.UserTags{"management"}})
	must("put user", res, err, created...)
	users, err := rh.ListUsers()
	if err != nil || !slices.ContainsFunc(users, func(u rabbithole.UserInfo) bool { return u.Name == "rh-user" }) {
		t.Fatalf("users %+v: %v", users, err)
	}
	if u, err := rh.GetUser("rh-user"); err != nil || !slices.Contains(u.Tags, "management") {
		t.Fatalf("user %+v: %v", u, err)
	}
	for _, u := range []string{"guest", "rh-user"} {
		res, err = rh.UpdatePermissionsIn("rh", u, rabbithole.Permissions{Configure: ".*", Write: ".*", Read: ".*"})
		must("set permissions", res, err, created...)
	}
	perms, err := rh.ListPermissionsOf("rh-user")
	if err != nil || len(perms) != 1 || perms[0].Vhost != "rh" || perms[0].Read != ".*" {
		t.Fatalf("permissions %+v: %v", perms, err)
	}
	if p, err := rh.GetPermissionsIn("rh", "rh-user"); err != nil || p.Configure != ".*" {
		t.Fatalf("permissions in rh %+v: %v", p, err)
	}

	res, err = rh.DeclareQueue("rh", "orders", rabbithole.QueueSettings{Durable: true, Arguments: map[string]any{"x-message-ttl": 60000}})
	must("declare queue", res, err, created...)
	res, err = rh.DeclareExchange("rh", "orders-x", rabbithole.ExchangeSettings{Type: "topic", Durable: true})
	must("declare exchange", res, err, created...)
	res, err = rh.DeclareBinding("rh", rabbithole.BindingInfo{Source: "orders-x", Destination: "orders", DestinationType: "queue", RoutingKey: "order.*"})
	must("declare binding", res, err, created...)
	// Vhost limits in rabbit-hole's shapes: max-queues 1 refuses a
	// second queue, and a deleted limit refuses nothing.
	res, err = rh.PutVhostLimits("rh", rabbithole.VhostLimitsValues{"max-queues": 1, "max-connections": 10})
	must("put vhost limits", res, err, created...)
	if l, err := rh.GetVhostLimits("rh"); err != nil || len(l) != 1 || l[0].Vhost != "rh" || l[0].Value["max-queues"] != 1 || l[0].Value["max-connections"] != 10 {
		t.Fatalf("vhost limits %+v: %v", l, err)
	}
	if _, err := rh.DeclareQueue("rh", "second", rabbithole.QueueSettings{Durable: true}); err == nil || !strings.Contains(err.Error(), "queue limit in vhost 'rh' (1) is reached") {
		t.Fatalf("a queue past max-queues: %v", err)
	}
	res, err = rh.DeleteVhostLimits("rh", rabbithole.VhostLimits{"max-queues", "max-connections"})
	must("delete vhost limits", res, err, created...)
	if l, err := rh.GetAllVhostLimits(); err != nil || len(l) != 0 {
		t.Fatalf("vhost limits after delete %+v: %v", l, err)
	}
	queues, err := rh.ListQueuesIn("rh")
	if err != nil || len(queues) != 1 || queues[0].Name != "orders" || !queues[0].Durable {
		t.Fatalf("queues %+v: %v", queues, err)
	}
	if _, err := rh.ListQueues(); err != nil {
		t.Fatalf("all queues: %v", err)
	}
	q, err := rh.GetQueue("rh", "orders")
	if err != nil || q.Name != "orders" || q.Arguments["x-message-ttl"] != float64(60000) {
		t.Fatalf("queue %+v: %v", q, err)
	}
	exchanges, err := rh.ListExchangesIn("rh")
	if err != nil || !slices.ContainsFunc(exchanges, func(x rabbithole.ExchangeInfo) bool { return x.Name == "orders-x" && x.Type == "topic" }) {
		t.Fatalf("exchanges %+v: %v", exchanges, err)
	}
	if x, err := rh.GetExchange("rh", "orders-x"); err != nil || x.Type != "topic" {
		t.Fatalf("exchange %+v: %v", x, err)
	}
	bindings, err := rh.ListQueueBindings("rh", "orders")
	if err != nil || !slices.ContainsFunc(bindings, func(b rabbithole.BindingInfo) bool { return b.Source == "orders-x" && b.RoutingKey == "order.*" }) {
		t.Fatalf("bindings %+v: %v", bindings, err)
	}
	if _, err := rh.ListBindings(); err != nil {
		t.Fatalf("all bindings: %v", err)
	}
	res, err = rh.DeleteBinding("rh", bindings[slices.IndexFunc(bindings, func(b rabbithole.BindingInfo) bool { return b.Source == "orders-x" })])
	must("delete binding", res, err, http.StatusNoContent)
	if bs, err := rh.ListExchangeBindingsWithSource("rh", "orders-x"); err != nil || len(bs) != 0 {
		t.Fatalf("bindings after delete %+v: %v", bs, err)
	}

	res, err = rh.PutPolicy("rh", "cap", rabbithole.Policy{Pattern: "^orders$", ApplyTo: "queues", Priority: 1,
		Definition: rabbithole.PolicyDefinition{"max-length": 1000}})
	must("put policy", res, err, created...)
	policies, err := rh.ListPoliciesIn("rh")
	if err != nil || len(policies) != 1 || policies[0].Definition["max-length"] != float64(1000) {
		t.Fatalf("policies %+v: %v", policies, err)
	}
	if p, err := rh.GetPolicy("rh", "cap"); err != nil || p.Pattern != "^orders$" {
		t.Fatalf("policy %+v: %v", p, err)
	}

	// A connection to another node, listed and closed through the follower.
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName("rabbit-hole-e2e")
	other := c.Nodes[0]
	if other == f {
		other = c.Nodes[1]
	}
	conn, err := amqp.DialConfig(other.AMQPURL()+"rh", amqp.Config{Properties: props})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	var name string
	if err := Eventually(10*time.Second, func() error {
		conns, err := rh.ListConnections()
		if err != nil {
			return err
		}
		for _, ci := range conns {
			if ci.ClientProperties["connection_name"] == "rabbit-hole-e2e" {
				name = ci.Name
				return nil
			}
		}
		return fmt.Errorf("connection rabbit-hole-e2e not listed in %+v", conns)
	}); err != nil {
		t.Fatal(err)
	}
	if ci, err := rh.GetConnection(name); err != nil || ci.Node != other.ID || ci.User != "guest" {
		t.Fatalf("connection %+v: %v", ci, err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Publish("", "orders", false, false, amqp.Publishing{Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	// The publish went to another node: wait for the follower to apply it.
	if err := Eventually(10*time.Second, func() error {
		if q, err := rh.GetQueue("rh", "orders"); err != nil || q.Messages != 1 {
			return fmt.Errorf("queue %+v: %v", q, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	res, err = rh.PurgeQueue("rh", "orders")
	must("purge queue", res, err, http.StatusNoContent)
	if _, err := ch.Consume("orders", "rh-ctag", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := Eventually(10*time.Second, func() error {
		cs, err := rh.ListConsumersIn("rh")
		if err != nil || len(cs) != 1 || cs[0].ConsumerTag != "rh-ctag" {
			return fmt.Errorf("consumers %+v: %v", cs, err)
		}
		chs, err := rh.ListChannels()
		if err != nil || len(chs) != 1 || chs[0].ConsumerCount != 1 {
			return fmt.Errorf("channels %+v: %v", chs, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	res, err = rh.CloseConnection(name)
	must("close connection", res, err, http.StatusNoContent)
	select {
	case e := <-closed:
		if e == nil || e.Code != amqp.ConnectionForced {
			t.Fatalf("closed with %v", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the connection was not closed")
	}

	defs, err := rh.ListDefinitions()
	if err != nil || !slices.ContainsFunc(*defs.Queues, func(q rabbithole.QueueInfo) bool { return q.Name == "orders" && q.Vhost == "rh" }) {
		t.Fatalf("definitions %+v: %v", defs, err)
	}

	// rabbit-hole v2's definitions type drops the user and vhost of a
	// permission, so an export does not go back in whole (nor into
	// RabbitMQ); what it carries does.
	res, err = rh.UploadDefinitions(&rabbithole.ExportedDefinitions{Queues: &[]rabbithole.QueueInfo{{Name: "imported", Vhost: "rh", Durable: true}}})
	must("upload definitions", res, err, http.StatusOK, http.StatusCreated, http.StatusNoContent)
	if q, err := rh.GetQueue("rh", "imported"); err != nil || !q.Durable {
		t.Fatalf("imported queue %+v: %v", q, err)
	}

	res, err = rh.DeletePolicy("rh", "cap")
	must("delete policy", res, err, http.StatusNoContent)
	res, err = rh.DeleteQueue("rh", "orders")
	must("delete queue", res, err, http.StatusNoContent)
	if _, err := rh.GetQueue("rh", "orders"); err == nil {
		t.Fatal("the deleted queue is still there")
	}
	res, err = rh.DeleteUser("rh-user")
	must("delete user", res, err, http.StatusNoContent)
	res, err = rh.DeleteVhost("rh")
	must("delete vhost", res, err, http.StatusNoContent)
}
