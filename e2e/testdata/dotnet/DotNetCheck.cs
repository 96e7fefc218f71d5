// Drives a raftmq cluster with RabbitMQ's .NET client as Debian's Mono
// ships it (libmono-rabbitmq4.0-cil, the client's 1.x line), and checks
// what an application written against that client relies on.
//
// usage: mono DotNetCheck.exe HOST:PORT HOST:PORT HOST:PORT
//
// Every check runs even when an earlier one failed, so that one run shows
// all that is broken. stdout carries "PASS name" lines, stderr a
// "FAIL name: why" line for each failed check, and the exit status is 1
// when one failed.

using System;
using System.Collections;
using System.Collections.Generic;
using System.Diagnostics;
using System.Globalization;
using System.IO;
using System.Text;
using System.Threading;
using RabbitMQ.Client;
using RabbitMQ.Client.Events;
using RabbitMQ.Client.Exceptions;

public static class DotNetCheck
{
    // Generous: other clusters share this machine's cores.
    const int WaitMs = 60000;

    // The client's RPCs wait for the broker's answer without a timeout,
    // so a check that outlives this is taken to hang.
    const int CheckMs = 120000;

    static string[] nodes;
    static readonly List<string> failed = new List<string>();

    // A broker behaviour that differs from what the check expects.
    sealed class CheckFailure : Exception
    {
        public CheckFailure(string msg) : base(msg) { }
    }

    public static int Main(string[] args)
    {
        if (args.Length != 3)
        {
            Console.Error.WriteLine("usage: mono DotNetCheck.exe HOST:PORT HOST:PORT HOST:PORT");
            return 2;
        }
        nodes = args;
        Run("tx-and-properties", TxAndProperties);
        Run("qos-reject-dead-letter", QosRejectDeadLetter);
        Run("ttl-dead-letter", TtlDeadLetter);
        Run("refusals", Refusals);
        Run("large-body", LargeBody);
        Run("get-purge-delete", GetPurgeDelete);
        Run("tx-rollback", TxRollback);
        int status = 0;
        if (failed.Count > 0)
        {
            Console.Error.WriteLine("FAILED checks: " + string.Join(", ", failed.ToArray()));
            Console.Error.Flush();
            status = 1;
        }
        else
        {
            Say("ALL PASSED");
        }
        // Neither a hung check's thread nor the client's threads of the
        // connections it left may keep the process alive.
        Environment.Exit(status);
        return status;
    }

    // Runs check on its own thread: the client has no RPC timeout, and a
    // check that hangs must fail, not stop the program. Its connections
    // are aborted at the end, which also frees a thread blocked in them.
    static void Run(string name, Action<Clients> check)
    {
        var clients = new Clients(name);
        Exception error = null;
        var sw = Stopwatch.StartNew();
        var t = new Thread(() =>
        {
            try
            {
                check(clients);
            }
            catch (Exception e)
            {
                error = e;
            }
        });
        t.IsBackground = true;
        t.Start();
        bool finished = t.Join(CheckMs);
        clients.AbortAll();
        if (!finished)
        {
            Fail(name, string.Format("still running after {0} s (a call to the broker never returned)", CheckMs / 1000));
        }
        else if (error is CheckFailure)
        {
            Fail(name, error.Message);
        }
        else if (error != null)
        {
            Fail(name, "unexpected " + error);
        }
        else
        {
            Say(string.Format("PASS {0} ({1} ms)", name, sw.ElapsedMilliseconds));
        }
    }

    static void Fail(string name, string why)
    {
        failed.Add(name);
        Console.Error.WriteLine("FAIL " + name + ": " + why);
        Console.Error.Flush();
    }

    static void Say(string line)
    {
        Console.Out.WriteLine(line);
        Console.Out.Flush();
    }

    static void Expect(bool cond, string format, params object[] args)
    {
        if (!cond)
        {
            throw new CheckFailure(string.Format(format, args));
        }
    }

    static CheckFailure Failure(string format, params object[] args)
    {
        return new CheckFailure(string.Format(format, args));
    }

    // Opens connections, one node each, and aborts them all at the end.
    sealed class Clients
    {
        readonly string check;
        readonly List<IConnection> open = new List<IConnection>();

        public Clients(string check)
        {
            this.check = check;
        }

        public IConnection To(int node, string role)
        {
            string[] hostPort = nodes[node].Split(':');
            var f = new ConnectionFactory();
            // The client speaks AMQP 0-8 unless told otherwise and has no
            // 0-9-1; RabbitMQ, and raftmq like it, serve its 0-9 as 0-9-1.
            f.Protocol = Protocols.AMQP_0_9;
            f.HostName = hostPort[0];
            f.Port = int.Parse(hostPort[1]);
            f.UserName = "guest";
            f.Password = "guest";
            f.VirtualHost = "/";
            // Names the connection in the broker's connection lists.
            f.ClientProperties["connection_name"] = "dotnet-" + check + "-" + role;
            IConnection c = f.CreateConnection();
            lock (open)
            {
                open.Add(c);
            }
            return c;
        }

        public void AbortAll()
        {
            lock (open)
            {
                foreach (IConnection c in open)
                {
                    c.Abort(10000);
                }
                open.Clear();
            }
        }
    }

    // Collects a consumer's deliveries for the check's thread.
    sealed class Inbox
    {
        readonly IModel model;
        public readonly QueueingBasicConsumer Consumer;

        public Inbox(IModel model)
        {
            this.model = model;
            Consumer = new QueueingBasicConsumer(model);
        }

        // Returns the next delivery within ms, or null.
        public BasicDeliverEventArgs Poll(int ms)
        {
            object o;
            try
            {
                if (!Consumer.Queue.Dequeue(ms, out o))
                {
                    return null;
                }
            }
            catch (EndOfStreamException)
            {
                throw Failure("the consumer's model closed: {0}", model.CloseReason);
            }
            return (BasicDeliverEventArgs)o;
        }

        public BasicDeliverEventArgs Next(string what)
        {
            BasicDeliverEventArgs d = Poll(WaitMs);
            if (d == null)
            {
                throw Failure("no delivery of {0} within {1} s", what, WaitMs / 1000);
            }
            return d;
        }
    }

    static byte[] Utf8(string s)
    {
        return Encoding.UTF8.GetBytes(s);
    }

    static string Text(byte[] b)
    {
        return Encoding.UTF8.GetString(b);
    }

    static long NowUnix()
    {
        return (long)(DateTime.UtcNow - new DateTime(1970, 1, 1, 0, 0, 0, DateTimeKind.Utc)).TotalSeconds;
    }

    static void Durable(IModel m, string queue, IDictionary args)
    {
        m.QueueDeclare(queue, false, true, false, false, false, args);
    }

    static IBasicProperties Persistent(IModel m, string messageId)
    {
        IBasicProperties p = m.CreateBasicProperties();
        p.DeliveryMode = 2;
        p.MessageId = messageId;
        return p;
    }

    // Publishes bodies persistent in one transaction: tx.commit-ok is how
    // this client learns that the broker has them, it has no confirms.
    static void PublishCommitted(IModel m, string queue, params string[] bodies)
    {
        m.TxSelect();
        foreach (string b in bodies)
        {
            m.BasicPublish("", queue, Persistent(m, b), Utf8(b));
        }
        m.TxCommit();
    }

    // The headers of message i: a value of each type this client writes
    // (string, int, long, bool, byte, short, float, double, decimal,
    // timestamp, table, array, byte[], BinaryTableValue and void).
    static Hashtable RichHeaders(int i, long baseSec)
    {
        var deeper = new Hashtable();
        deeper["n"] = (long)i * 3;
        deeper["flags"] = new ArrayList { true, false };
        var nested = new Hashtable();
        nested["inner"] = "v" + i;
        nested["depth"] = 2;
        nested["deeper"] = deeper;
        nested["empty-table"] = new Hashtable();

        var inList = new Hashtable();
        inList["k"] = "in-list-" + i;
        var list = new ArrayList { i, "item", false, (long)-i, new byte[] { 9, 8, 7 }, inList, new ArrayList { "a", 1 }, new ArrayList() };

        var h = new Hashtable();
        h["string"] = "text-" + i;
        h["unicode"] = "grüße ✓ " + i;
        h["empty-string"] = "";
        h["int"] = i;
        h["negative-int"] = -i - 1;
        h["int-max"] = int.MaxValue;
        h["long"] = (1L << 40) + i;
        h["long-min"] = long.MinValue;
        h["bool-true"] = true;
        h["bool-alt"] = i % 2 == 0;
        // Above 127: the wire's 'b' is a signed octet, the client's a Byte.
        h["byte"] = (byte)(200 + i % 50);
        h["short"] = (short)(-1000 - i);
        h["float"] = 1.5f + i;
        h["double"] = -2.25 * i;
        h["decimal"] = new decimal(12345 + i, 0, 0, false, 3);
        h["negative-decimal"] = -987.65m;
        h["decimal-trailing-zero"] = 1.50m;
        h["timestamp"] = new AmqpTimestamp(baseSec + i);
        h["timestamp-2100"] = new AmqpTimestamp(4102444800L);
        h["nested"] = nested;
        h["list"] = list;
        h["bytes"] = new byte[] { 0, 1, 2, 0xff, (byte)i };
        h["empty-bytes"] = new byte[0];
        h["binary"] = new BinaryTableValue(new byte[] { 0xde, 0xad, (byte)i });
        h["void"] = null;
        return h;
    }

    static IBasicProperties RichProps(IModel m, int i, long baseSec)
    {
        IBasicProperties p = m.CreateBasicProperties();
        p.ContentType = "application/json";
        p.ContentEncoding = "utf-8";
        p.Headers = RichHeaders(i, baseSec);
        p.DeliveryMode = 2;
        p.Priority = (byte)(i % 10);
        p.CorrelationId = "corr-" + i;
        p.ReplyTo = "dotnet-replies";
        p.MessageId = "msg-" + i;
        p.Timestamp = new AmqpTimestamp(baseSec + i);
        p.Type = "check." + (i % 3);
        p.UserId = "guest";
        p.AppId = "DotNetCheck";
        return p;
    }

    static string Hex(byte[] b)
    {
        return BitConverter.ToString(b);
    }

    static string Show(object v)
    {
        if (v == null)
        {
            return "null";
        }
        if (v is byte[])
        {
            // Strings come back as byte[]: show their text as well.
            return "byte[]{" + Hex((byte[])v) + "} \"" + Text((byte[])v) + "\"";
        }
        if (v is string)
        {
            return "string \"" + v + "\"";
        }
        if (v is AmqpTimestamp)
        {
            return "AmqpTimestamp(" + ((AmqpTimestamp)v).UnixTime + ")";
        }
        if (v is BinaryTableValue)
        {
            return "BinaryTableValue{" + Hex(((BinaryTableValue)v).Bytes) + "}";
        }
        if (v is IDictionary)
        {
            var parts = new List<string>();
            foreach (DictionaryEntry e in (IDictionary)v)
            {
                parts.Add(e.Key + "=" + Show(e.Value));
            }
            return "{" + string.Join(", ", parts.ToArray()) + "}";
        }
        if (v is IList)
        {
            var parts = new List<string>();
            foreach (object e in (IList)v)
            {
                parts.Add(Show(e));
            }
            return "[" + string.Join(", ", parts.ToArray()) + "]";
        }
        return v.GetType().Name + "(" + v + ")";
    }

    static bool SameBytes(byte[] a, byte[] b)
    {
        if (a.Length != b.Length)
        {
            return false;
        }
        for (int i = 0; i < a.Length; i++)
        {
            if (a[i] != b[i])
            {
                return false;
            }
        }
        return true;
    }

    static string Keys(IDictionary d)
    {
        var keys = new List<string>();
        foreach (object k in d.Keys)
        {
            keys.Add(k.ToString());
        }
        keys.Sort(StringComparer.Ordinal);
        return string.Join(",", keys.ToArray());
    }

    // Compares a value sent with the one the client decoded. The client
    // writes strings and byte arrays alike as long strings and decodes
    // every long string as byte[]; every other type it decodes as itself.
    static void SameValue(string path, object sent, object got)
    {
        if (sent == null)
        {
            Expect(got == null, "{0}: sent void, got {1}", path, Show(got));
            return;
        }
        Expect(got != null, "{0}: sent {1}, got null", path, Show(sent));
        if (sent is string || sent is byte[])
        {
            byte[] want = sent is string ? Utf8((string)sent) : (byte[])sent;
            Expect(got is byte[] && SameBytes(want, (byte[])got), "{0}: sent {1}, got {2}", path, Show(sent), Show(got));
        }
        else if (sent is IDictionary)
        {
            Expect(got is IDictionary, "{0}: sent a table, got {1}", path, Show(got));
            var s = (IDictionary)sent;
            var g = (IDictionary)got;
            Expect(Keys(s) == Keys(g), "{0}: sent keys {1}, got keys {2}", path, Keys(s), Keys(g));
            foreach (DictionaryEntry e in s)
            {
                SameValue(path + "." + e.Key, e.Value, g[e.Key]);
            }
        }
        else if (sent is IList)
        {
            Expect(got is IList, "{0}: sent an array, got {1}", path, Show(got));
            var s = (IList)sent;
            var g = (IList)got;
            Expect(s.Count == g.Count, "{0}: sent {1} elements, got {2}: {3}", path, s.Count, g.Count, Show(g));
            for (int j = 0; j < s.Count; j++)
            {
                SameValue(path + "[" + j + "]", s[j], g[j]);
            }
        }
        else if (sent is AmqpTimestamp)
        {
            Expect(got is AmqpTimestamp && ((AmqpTimestamp)sent).UnixTime == ((AmqpTimestamp)got).UnixTime,
                "{0}: sent {1}, got {2}", path, Show(sent), Show(got));
        }
        else if (sent is BinaryTableValue)
        {
            Expect(got is BinaryTableValue && SameBytes(((BinaryTableValue)sent).Bytes, ((BinaryTableValue)got).Bytes),
                "{0}: sent {1}, got {2}", path, Show(sent), Show(got));
        }
        else if (sent is decimal)
        {
            // decimal's Equals ignores the scale, which the wire carries
            // and the invariant text shows ("1.50" is not "1.5").
            Expect(got is decimal && ((decimal)sent).ToString(CultureInfo.InvariantCulture) == ((decimal)got).ToString(CultureInfo.InvariantCulture),
                "{0}: sent {1}, got {2}", path, Show(sent), Show(got));
        }
        else if (sent is double)
        {
            Expect(got is double && BitConverter.DoubleToInt64Bits((double)sent) == BitConverter.DoubleToInt64Bits((double)got),
                "{0}: sent {1}, got {2}", path, Show(sent), Show(got));
        }
        else
        {
            Expect(got.GetType() == sent.GetType() && sent.Equals(got), "{0}: sent {1}, got {2}", path, Show(sent), Show(got));
        }
    }

    static void SameProp(string what, object sent, object got)
    {
        Expect(sent == null ? got == null : sent.Equals(got), "{0}: sent {1}, got {2}", what, Show(sent), Show(got));
    }

    static void SameProps(string msg, IBasicProperties s, IBasicProperties g)
    {
        SameProp(msg + " content-type", s.ContentType, g.ContentType);
        SameProp(msg + " content-encoding", s.ContentEncoding, g.ContentEncoding);
        SameProp(msg + " delivery-mode", s.DeliveryMode, g.DeliveryMode);
        SameProp(msg + " priority", s.Priority, g.Priority);
        SameProp(msg + " correlation-id", s.CorrelationId, g.CorrelationId);
        SameProp(msg + " reply-to", s.ReplyTo, g.ReplyTo);
        SameProp(msg + " expiration", s.Expiration, g.Expiration);
        SameProp(msg + " message-id", s.MessageId, g.MessageId);
        Expect(g.IsTimestampPresent(), "{0}: timestamp absent", msg);
        SameProp(msg + " timestamp", s.Timestamp.UnixTime, g.Timestamp.UnixTime);
        SameProp(msg + " type", s.Type, g.Type);
        SameProp(msg + " user-id", s.UserId, g.UserId);
        SameProp(msg + " app-id", s.AppId, g.AppId);
        SameValue(msg + " headers", s.Headers, g.Headers);
    }

    // Persistent messages with every property, committed in a transaction
    // on one node and consumed in order on another.
    static void TxAndProperties(Clients clients)
    {
        const string q = "dotnet-props";
        const int n = 300;
        long baseSec = NowUnix();
        IModel pub = clients.To(0, "pub").CreateModel();
        Durable(pub, q, null);
        pub.TxSelect();
        var sent = new List<IBasicProperties>();
        for (int i = 0; i < n; i++)
        {
            IBasicProperties p = RichProps(pub, i, baseSec);
            sent.Add(p);
            pub.BasicPublish("", q, p, Utf8("{\"body\":" + i + "}"));
        }
        pub.TxCommit();

        IModel sub = clients.To(1, "sub").CreateModel();
        sub.BasicQos(0, 50, false);
        var inbox = new Inbox(sub);
        sub.BasicConsume(q, false, null, inbox.Consumer);
        for (int i = 0; i < n; i++)
        {
            BasicDeliverEventArgs d = inbox.Next("message " + i + " of " + n);
            string want = "{\"body\":" + i + "}";
            Expect(want == Text(d.Body), "delivery {0}: body {1}, want {2} (lost or out of order)", i, Text(d.Body), want);
            Expect(d.Exchange == "" && d.RoutingKey == q && !d.Redelivered,
                "delivery {0}: exchange \"{1}\", routing key \"{2}\", redelivered {3}; want \"\", \"{4}\", False",
                i, d.Exchange, d.RoutingKey, d.Redelivered, q);
            SameProps("message " + i, sent[i], d.BasicProperties);
            sub.BasicAck(d.DeliveryTag, false);
        }
    }

    // Checks the x-death header of one death as the client decodes it.
    static void CheckDeath(BasicDeliverEventArgs d, string reason, string queue, long notBefore, long notAfter)
    {
        IDictionary h = d.BasicProperties.Headers;
        Expect(h != null, "dead-lettered message without headers");
        object xd = h["x-death"];
        Expect(xd is IList, "x-death is {0}, want an array", Show(xd));
        var deaths = (IList)xd;
        Expect(deaths.Count == 1, "x-death has {0} entries, want 1: {1}", deaths.Count, Show(deaths));
        Expect(deaths[0] is IDictionary, "x-death[0] is {0}, want a table", Show(deaths[0]));
        var death = (IDictionary)deaths[0];
        SameValue("x-death[0].count", 1L, death["count"]);
        SameValue("x-death[0].reason", reason, death["reason"]);
        SameValue("x-death[0].queue", queue, death["queue"]);
        SameValue("x-death[0].exchange", "", death["exchange"]);
        SameValue("x-death[0].routing-keys", new ArrayList { queue }, death["routing-keys"]);
        object time = death["time"];
        Expect(time is AmqpTimestamp, "x-death[0].time is {0}, want an AmqpTimestamp", Show(time));
        long t = ((AmqpTimestamp)time).UnixTime;
        // Whole seconds on the wire.
        Expect(t >= notBefore - 1 && t <= notAfter + 1, "x-death[0].time is {0}, want between {1} and {2}", t, notBefore, notAfter);
        SameValue("x-first-death-reason", reason, h["x-first-death-reason"]);
        SameValue("x-first-death-queue", queue, h["x-first-death-queue"]);
        SameValue("x-first-death-exchange", "", h["x-first-death-exchange"]);
    }

    // The dead-letter exchange dlx, fanning out to queue dead.
    static void DeadLetterTarget(IModel m, string dlx, string dead)
    {
        m.ExchangeDeclare(dlx, "fanout", true);
        Durable(m, dead, null);
        m.QueueBind(dead, dlx, "", false, null);
    }

    static void QosRejectDeadLetter(Clients clients)
    {
        const string q = "dotnet-work";
        const string dlx = "dotnet-work-dlx";
        const string dead = "dotnet-work-dead";
        const int n = 20;
        const int prefetch = 5;
        IModel setup = clients.To(0, "pub").CreateModel();
        DeadLetterTarget(setup, dlx, dead);
        var args = new Hashtable();
        args["x-dead-letter-exchange"] = dlx;
        Durable(setup, q, args);
        var ids = new string[n];
        for (int i = 0; i < n; i++)
        {
            ids[i] = "w-" + i;
        }
        PublishCommitted(setup, q, ids);

        IModel ch = clients.To(2, "sub").CreateModel();
        ch.BasicQos(0, prefetch, false);
        var inbox = new Inbox(ch);
        ch.BasicConsume(q, false, null, inbox.Consumer);
        var first = new List<BasicDeliverEventArgs>();
        for (int i = 0; i < prefetch; i++)
        {
            BasicDeliverEventArgs d = inbox.Next("w-" + i);
            Expect(Text(d.Body) == "w-" + i && !d.Redelivered, "delivery {0}: {1} redelivered {2}, want w-{0} not redelivered",
                i, Text(d.Body), d.Redelivered);
            first.Add(d);
        }
        // The only wait for something not to happen: a consumer at its
        // prefetch limit must get nothing more until it settles one.
        BasicDeliverEventArgs over = inbox.Poll(1000);
        Expect(over == null, "BasicQos({0}): a delivery beyond the prefetch arrived with {0} unacked: {1}",
            prefetch, over == null ? "" : Text(over.Body));

        int settled = 0;
        ch.BasicAck(first[0].DeliveryTag, false);
        settled++;
        BasicDeliverEventArgs sixth = inbox.Next("w-5 after one ack");
        Expect(Text(sixth.Body) == "w-5", "after acking w-0: got {0}, want w-5", Text(sixth.Body));
        int received = prefetch + 1;

        long rejectedAt = NowUnix();
        ch.BasicReject(first[2].DeliveryTag, false);
        settled++;
        ch.BasicReject(first[1].DeliveryTag, true);
        settled++;
        var unacked = new List<BasicDeliverEventArgs>(first.GetRange(3, prefetch - 3));
        unacked.Add(sixth);
        foreach (BasicDeliverEventArgs d in unacked)
        {
            ch.BasicAck(d.DeliveryTag, false);
            settled++;
        }

        // Every message but the dead-lettered w-2 is consumed once more,
        // w-1 flagged redelivered, the rest not.
        var seen = new HashSet<string>();
        for (int i = 0; i <= prefetch; i++)
        {
            seen.Add("w-" + i);
        }
        seen.Remove("w-2");
        bool w1Back = false;
        while (!w1Back || seen.Count < n - 1)
        {
            BasicDeliverEventArgs d = inbox.Next(string.Format("the rest of {0} (seen {1} of {2}, w-1 back {3})", q, seen.Count, n - 1, w1Back));
            received++;
            Expect(received - settled <= prefetch, "BasicQos({0}): {1} deliveries unacked", prefetch, received - settled);
            string id = Text(d.Body);
            Expect(id != "w-2", "w-2, rejected without requeue, was delivered again (redelivered {0})", d.Redelivered);
            if (id == "w-1")
            {
                Expect(!w1Back, "w-1 delivered a third time");
                Expect(d.Redelivered, "w-1, rejected with requeue, came back with Redelivered false");
                w1Back = true;
            }
            else
            {
                Expect(!d.Redelivered, "{0} delivered with Redelivered true, it was never requeued", id);
                Expect(seen.Add(id), "{0} delivered twice", id);
            }
            ch.BasicAck(d.DeliveryTag, false);
            settled++;
        }

        IModel dch = clients.To(1, "dead").CreateModel();
        var deadIn = new Inbox(dch);
        dch.BasicConsume(dead, false, null, deadIn.Consumer);
        BasicDeliverEventArgs dl = deadIn.Next("the rejected w-2 from " + dead);
        Expect(Text(dl.Body) == "w-2", "dead-lettered {0}, want w-2", Text(dl.Body));
        SameProp("dead-lettered message-id", "w-2", dl.BasicProperties.MessageId);
        SameProp("dead-lettered exchange", dlx, dl.Exchange);
        CheckDeath(dl, "rejected", q, rejectedAt, NowUnix());
        dch.BasicAck(dl.DeliveryTag, false);
    }

    static void TtlDeadLetter(Clients clients)
    {
        const string q = "dotnet-ttl";
        const string dlx = "dotnet-ttl-dlx";
        const string dead = "dotnet-ttl-dead";
        const int ttlMs = 1000;
        IModel setup = clients.To(1, "setup").CreateModel();
        DeadLetterTarget(setup, dlx, dead);
        var args = new Hashtable();
        args["x-message-ttl"] = ttlMs;
        args["x-dead-letter-exchange"] = dlx;
        Durable(setup, q, args);

        IModel dch = clients.To(2, "dead").CreateModel();
        var inbox = new Inbox(dch);
        dch.BasicConsume(dead, false, null, inbox.Consumer);

        IModel pub = clients.To(0, "pub").CreateModel();
        var sw = Stopwatch.StartNew();
        DateTime startWall = DateTime.UtcNow;
        long startUnix = NowUnix();
        pub.TxSelect();
        pub.BasicPublish("", q, Persistent(pub, "ttl-1"), Utf8("expires"));
        pub.TxCommit();
        BasicDeliverEventArgs d = inbox.Next("the expired message from " + dead);
        // The broker times expiry by wall clocks, so a step of this
        // machine's clock shortens one of the two readings; it is early
        // only when both say so.
        double took = Math.Max(sw.Elapsed.TotalMilliseconds, (DateTime.UtcNow - startWall).TotalMilliseconds);
        Expect(Text(d.Body) == "expires", "dead-lettered body {0}, want expires", Text(d.Body));
        Expect(took >= ttlMs, "dead-lettered {0:F0} ms after the publish, before the queue's TTL of {1} ms", took, ttlMs);
        SameProp("dead-lettered message-id", "ttl-1", d.BasicProperties.MessageId);
        SameProp("dead-lettered expiration", null, d.BasicProperties.Expiration);
        CheckDeath(d, "expired", q, startUnix, NowUnix());
        dch.BasicAck(d.DeliveryTag, false);
    }

    // The channel.close a refused operation brought, or a failure naming
    // what was thrown instead.
    static ShutdownEventArgs ChannelClose(string op, Action call)
    {
        try
        {
            call();
        }
        catch (OperationInterruptedException e)
        {
            ShutdownEventArgs r = e.ShutdownReason;
            Expect(r != null && r.Initiator == ShutdownInitiator.Peer, "{0}: closed by {1}, want the broker", op, r);
            return r;
        }
        throw Failure("{0} succeeded", op);
    }

    static void Refusals(Clients clients)
    {
        const string missing = "dotnet-no-such-queue";
        const string q = "dotnet-args";
        IConnection conn = clients.To(2, "refused");
        IModel ch = conn.CreateModel();
        ShutdownEventArgs r = ChannelClose("passive QueueDeclare(" + missing + ")",
            () => ch.QueueDeclare(missing, true, false, false, false, false, null));
        Expect(r.ReplyCode == 404 && r.ReplyText.StartsWith("NOT_FOUND") && r.ClassId == 50 && r.MethodId == 10,
            "passive QueueDeclare({0}): {1} {2} for {3}.{4}, want 404 NOT_FOUND for queue.declare (50.10)",
            missing, r.ReplyCode, r.ReplyText, r.ClassId, r.MethodId);
        Expect(!ch.IsOpen, "the model is still open after the 404");
        Expect(conn.IsOpen, "the connection closed after a channel-level 404: {0}", conn.CloseReason);

        // A new model on the same connection does all a model does.
        var args = new Hashtable();
        args["x-max-length"] = 10;
        IModel again = conn.CreateModel();
        Durable(again, q, args);
        PublishCommitted(again, q, "after-404");
        BasicGetResult got = again.BasicGet(q, true);
        Expect(got != null && Text(got.Body) == "after-404", "after the 404, a new model got {0} from {1}, want after-404",
            got == null ? "nothing" : Text(got.Body), q);

        // The refusal of a mismatched redeclare must hold on any node.
        IConnection other = clients.To(0, "other");
        var different = new Hashtable();
        different["x-max-length"] = 20;
        IModel och = other.CreateModel();
        r = ChannelClose("redeclaring " + q + " with x-max-length 20 (declared with 10)",
            () => Durable(och, q, different));
        Expect(r.ReplyCode == 406 && r.ReplyText.StartsWith("PRECONDITION_FAILED") && r.ClassId == 50 && r.MethodId == 10,
            "redeclare with other arguments: {0} {1} for {2}.{3}, want 406 PRECONDITION_FAILED for queue.declare (50.10)",
            r.ReplyCode, r.ReplyText, r.ClassId, r.MethodId);
        Expect(other.IsOpen, "the connection closed after a channel-level 406: {0}", other.CloseReason);
        string name = other.CreateModel().QueueDeclare(q, false, true, false, false, false, args);
        SameProp("redeclare with the same arguments", q, name);
    }

    static void LargeBody(Clients clients)
    {
        const string q = "dotnet-large";
        var body = new byte[1 << 20];
        new Random(1).NextBytes(body);
        IModel pub = clients.To(2, "pub").CreateModel();
        Durable(pub, q, null);
        pub.TxSelect();
        pub.BasicPublish("", q, Persistent(pub, "large"), body);
        pub.TxCommit();
        IModel sub = clients.To(1, "sub").CreateModel();
        var inbox = new Inbox(sub);
        sub.BasicConsume(q, false, null, inbox.Consumer);
        BasicDeliverEventArgs d = inbox.Next("the 1 MiB message");
        Expect(d.Body.Length == body.Length, "body of {0} bytes, want {1}", d.Body.Length, body.Length);
        for (int i = 0; i < body.Length; i++)
        {
            Expect(body[i] == d.Body[i], "the 1 MiB body differs from byte {0} on", i);
        }
        sub.BasicAck(d.DeliveryTag, false);
    }

    static void ExpectGot(BasicGetResult r, string body, uint left, bool redelivered, string when)
    {
        Expect(r != null, "{0}: BasicGet found the queue empty, want {1}", when, body);
        Expect(Text(r.Body) == body && r.MessageCount == left && r.Redelivered == redelivered,
            "{0}: BasicGet got {1} with {2} left, redelivered {3}; want {4} with {5} left, redelivered {6}",
            when, Text(r.Body), r.MessageCount, r.Redelivered, body, left, redelivered);
    }

    static void GetPurgeDelete(Clients clients)
    {
        const string q = "dotnet-get";
        IModel pub = clients.To(0, "pub").CreateModel();
        Durable(pub, q, null);
        IModel getter = clients.To(1, "get").CreateModel();
        BasicGetResult r = getter.BasicGet(q, false);
        Expect(r == null, "BasicGet on the empty {0} got {1}", q, r == null ? "" : Text(r.Body));

        PublishCommitted(pub, q, "g-0", "g-1", "g-2", "g-3", "g-4");
        BasicGetResult g0 = getter.BasicGet(q, false);
        ExpectGot(g0, "g-0", 4, false, "the first get");
        getter.BasicAck(g0.DeliveryTag, false);
        BasicGetResult g1 = getter.BasicGet(q, false);
        ExpectGot(g1, "g-1", 3, false, "the second get");

        // g-1 is unacked: a purge takes only the ready messages.
        IModel admin = clients.To(2, "admin").CreateModel();
        uint purged = admin.QueuePurge(q, false);
        Expect(purged == 3, "QueuePurge({0}) with g-2..g-4 ready and g-1 unacked: {1} purged, want 3", q, purged);
        r = getter.BasicGet(q, false);
        Expect(r == null, "BasicGet after the purge got {0}", r == null ? "" : Text(r.Body));
        getter.BasicAck(g1.DeliveryTag, false);

        PublishCommitted(pub, q, "g-5", "g-6");
        uint deleted = admin.QueueDelete(q, false, false, false);
        Expect(deleted == 2, "QueueDelete({0}) holding g-5 and g-6: {1} messages, want 2", q, deleted);
        IModel check = clients.To(0, "gone").CreateModel();
        ShutdownEventArgs closed = ChannelClose("passive QueueDeclare(" + q + ") after its delete",
            () => check.QueueDeclare(q, true, false, false, false, false, null));
        Expect(closed.ReplyCode == 404, "passive QueueDeclare({0}) after its delete: {1} {2}, want 404", q, closed.ReplyCode, closed.ReplyText);
    }

    // Messages published in a transaction that is rolled back never
    // reach the queue; the transaction goes on with the next publish.
    static void TxRollback(Clients clients)
    {
        const string q = "dotnet-rollback";
        IModel pub = clients.To(0, "pub").CreateModel();
        Durable(pub, q, null);
        pub.TxSelect();
        for (int i = 0; i < 10; i++)
        {
            pub.BasicPublish("", q, Persistent(pub, "rb-" + i), Utf8("rb-" + i));
        }
        pub.TxRollback();
        pub.BasicPublish("", q, Persistent(pub, "kept"), Utf8("kept"));
        pub.TxCommit();

        // Committed after the rolled-back ones, "kept" is the first and
        // only message once the commit returned: no wait for the
        // rolled-back ones not to arrive is needed.
        IModel getter = clients.To(1, "get").CreateModel();
        BasicGetResult r = getter.BasicGet(q, false);
        ExpectGot(r, "kept", 0, false, "after the rollback and a commit");
        getter.BasicAck(r.DeliveryTag, false);
        r = getter.BasicGet(q, false);
        Expect(r == null, "after the rolled-back transaction, BasicGet got {0} besides kept", r == null ? "" : Text(r.Body));
    }
}
