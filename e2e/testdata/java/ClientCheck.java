import com.rabbitmq.client.AMQP;
import com.rabbitmq.client.Address;
import com.rabbitmq.client.Channel;
import com.rabbitmq.client.Connection;
import com.rabbitmq.client.ConnectionFactory;
import com.rabbitmq.client.DefaultConsumer;
import com.rabbitmq.client.Delivery;
import com.rabbitmq.client.Envelope;
import com.rabbitmq.client.LongString;
import com.rabbitmq.client.Method;
import com.rabbitmq.client.Recoverable;
import com.rabbitmq.client.RecoveryListener;
import com.rabbitmq.client.ShutdownSignalException;
import com.rabbitmq.client.TopologyRecoveryException;
import com.rabbitmq.client.impl.DefaultExceptionHandler;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.math.BigDecimal;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Date;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.Set;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * Drives a raftmq cluster with the RabbitMQ Java client the way a Java
 * application does, and checks what such an application relies on.
 *
 * <p>usage: java ClientCheck HOST:PORT HOST:PORT HOST:PORT
 *
 * <p>Every check runs even when an earlier one failed, so that one run
 * shows all that is broken. stdout carries "PASS name" lines and the
 * recovery check's protocol with its caller: "KILL port" asks the caller
 * to kill -9 the node listening on that AMQP port and to answer with a
 * line "KILLED" on stdin. A failed check prints "FAIL name: why" on
 * stderr and makes the exit status 1.
 */
public final class ClientCheck {
    /** Generous: other clusters share this machine's cores. */
    static final long WAIT_S = 60;

    static final long WAIT_MS = TimeUnit.SECONDS.toMillis(WAIT_S);

    static Address[] nodes;

    static final List<String> failed = new ArrayList<>();

    interface Check {
        void run() throws Exception;
    }

    /** A broker behaviour that differs from what the check expects. */
    static final class CheckFailure extends Exception {
        private static final long serialVersionUID = 1L;

        CheckFailure(String msg) {
            super(msg);
        }
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 3) {
            System.err.println("usage: java ClientCheck HOST:PORT HOST:PORT HOST:PORT");
            System.exit(2);
        }
        nodes = new Address[args.length];
        for (int i = 0; i < args.length; i++) {
            nodes[i] = Address.parseAddress(args[i]);
        }
        run("confirms-and-properties", ClientCheck::confirmsAndProperties);
        run("acks-qos-nack-reject", ClientCheck::acksQosNackReject);
        run("ttl-dead-letter", ClientCheck::ttlDeadLetter);
        run("direct-reply-to", ClientCheck::directReplyTo);
        run("refusals", ClientCheck::refusals);
        run("large-body", ClientCheck::largeBody);
        // Last: it kills a node.
        run("recovery", ClientCheck::recovery);
        if (!failed.isEmpty()) {
            System.err.println("FAILED checks: " + String.join(", ", failed));
            System.err.flush();
            System.exit(1);
        }
        say("ALL PASSED");
        // The client's threads of a connection a failed check left open
        // would keep the JVM alive.
        System.exit(0);
    }

    static void run(String name, Check c) {
        long start = System.nanoTime();
        try {
            c.run();
            say("PASS %s (%d ms)", name, TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start));
        } catch (Throwable e) {
            failed.add(name);
            if (e instanceof CheckFailure) {
                System.err.printf("FAIL %s: %s%n", name, e.getMessage());
            } else {
                System.err.printf("FAIL %s: unexpected %s%n", name, e);
                e.printStackTrace(System.err);
            }
            System.err.flush();
        }
    }

    static void say(String format, Object... args) {
        System.out.printf(format + "%n", args);
        System.out.flush();
    }

    static void fail(String format, Object... args) throws CheckFailure {
        throw new CheckFailure(String.format(format, args));
    }

    static void expect(boolean cond, String format, Object... args) throws CheckFailure {
        if (!cond) {
            fail(format, args);
        }
    }

    /** Opens plain connections, one node each, and aborts them all at the end. */
    static final class Clients implements AutoCloseable {
        final List<Connection> open = new ArrayList<>();

        Connection to(int node, String name) throws IOException, TimeoutException {
            ConnectionFactory f = new ConnectionFactory();
            // A dropped connection must fail the check, not be papered
            // over by a reconnect.
            f.setAutomaticRecoveryEnabled(false);
            f.setChannelRpcTimeout((int) WAIT_MS);
            Connection c = f.newConnection(new Address[] {nodes[node]}, name);
            open.add(c);
            return c;
        }

        @Override
        public void close() {
            for (Connection c : open) {
                c.abort(10000);
            }
        }
    }

    /** Collects a consumer's deliveries for the check's thread. */
    static final class Inbox extends DefaultConsumer {
        final BlockingQueue<Delivery> deliveries = new LinkedBlockingQueue<>();
        volatile String cancelled;

        Inbox(Channel ch) {
            super(ch);
        }

        @Override
        public void handleDelivery(String tag, Envelope env, AMQP.BasicProperties props, byte[] body) {
            deliveries.add(new Delivery(env, props, body));
        }

        @Override
        public void handleCancel(String tag) {
            cancelled = tag;
        }

        Delivery next(String what) throws Exception {
            Delivery d = deliveries.poll(WAIT_S, TimeUnit.SECONDS);
            if (d == null) {
                fail("no delivery of %s within %d s%s", what, WAIT_S,
                        cancelled != null ? " (the broker cancelled consumer " + cancelled + ")" : "");
            }
            return d;
        }
    }

    static byte[] utf8(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    static String text(Delivery d) {
        return new String(d.getBody(), StandardCharsets.UTF_8);
    }

    static AMQP.BasicProperties persistent(String messageId) {
        return new AMQP.BasicProperties.Builder().deliveryMode(2).messageId(messageId).build();
    }

    /** The headers of message i: one of each field type the client writes. */
    static Map<String, Object> richHeaders(int i, long baseSec) {
        Map<String, Object> nested = new LinkedHashMap<>();
        nested.put("inner", "v" + i);
        nested.put("depth", 2);
        Map<String, Object> deeper = new LinkedHashMap<>();
        deeper.put("n", (long) i * 3);
        deeper.put("flags", Arrays.asList(true, false));
        nested.put("deeper", deeper);
        nested.put("empty-table", new HashMap<String, Object>());

        List<Object> list = new ArrayList<>();
        list.add(i);
        list.add("item");
        list.add(false);
        list.add((long) -i);
        list.add(new byte[] {9, 8, 7});
        Map<String, Object> inList = new LinkedHashMap<>();
        inList.put("k", "in-list-" + i);
        list.add(inList);
        list.add(Arrays.asList("a", 1));
        list.add(new ArrayList<Object>());

        Map<String, Object> h = new LinkedHashMap<>();
        h.put("string", "text-" + i);
        h.put("unicode", "grüße ✓ " + i);
        h.put("empty-string", "");
        h.put("int", i);
        h.put("negative-int", -i - 1);
        h.put("int-max", Integer.MAX_VALUE);
        h.put("long", (1L << 40) + i);
        h.put("long-min", Long.MIN_VALUE);
        h.put("bool-true", true);
        h.put("bool-alt", i % 2 == 0);
        h.put("byte", (byte) -(i % 100));
        h.put("short", (short) (-1000 - i));
        h.put("float", 1.5f + i);
        h.put("double", -2.25 * i);
        h.put("nested", nested);
        h.put("list", list);
        h.put("bytes", new byte[] {0, 1, 2, (byte) 0xff, (byte) i});
        h.put("empty-bytes", new byte[0]);
        h.put("date", new Date((baseSec + i) * 1000));
        h.put("date-2100", new Date(4102444800L * 1000));
        h.put("decimal", BigDecimal.valueOf(12345L + i, 3));
        h.put("negative-decimal", BigDecimal.valueOf(-98765L, 2));
        h.put("void", null);
        return h;
    }

    static AMQP.BasicProperties richProps(int i, long baseSec) {
        return new AMQP.BasicProperties.Builder()
                .contentType("application/json")
                .contentEncoding("utf-8")
                .headers(richHeaders(i, baseSec))
                .deliveryMode(2)
                .priority(i % 10)
                .correlationId("corr-" + i)
                .replyTo("java-replies")
                .messageId("msg-" + i)
                .timestamp(new Date((baseSec + i) * 1000))
                .type("check." + (i % 3))
                .userId("guest")
                .appId("ClientCheck")
                .build();
    }

    static String show(Object v) {
        if (v == null) {
            return "null";
        }
        if (v instanceof byte[]) {
            return "byte[]" + Arrays.toString((byte[]) v);
        }
        if (v instanceof LongString) {
            return "LongString(\"" + v + "\")";
        }
        return v.getClass().getSimpleName() + "(" + v + ")";
    }

    /**
     * Compares a value sent with the one the client decoded: the client
     * decodes every string as a LongString, every other type as itself.
     */
    static void sameValue(String path, Object sent, Object got) throws CheckFailure {
        if (sent == null) {
            expect(got == null, "%s: sent void, got %s", path, show(got));
            return;
        }
        expect(got != null, "%s: sent %s, got null", path, show(sent));
        if (sent instanceof String) {
            expect(got instanceof LongString && sent.equals(got.toString()),
                    "%s: sent String \"%s\", got %s (want a LongString of it)", path, sent, show(got));
        } else if (sent instanceof Map) {
            expect(got instanceof Map, "%s: sent a table, got %s", path, show(got));
            Map<?, ?> s = (Map<?, ?>) sent;
            Map<?, ?> g = (Map<?, ?>) got;
            expect(s.keySet().equals(g.keySet()), "%s: sent keys %s, got keys %s", path, s.keySet(), g.keySet());
            for (Object k : s.keySet()) {
                sameValue(path + "." + k, s.get(k), g.get(k));
            }
        } else if (sent instanceof List) {
            expect(got instanceof List, "%s: sent an array, got %s", path, show(got));
            List<?> s = (List<?>) sent;
            List<?> g = (List<?>) got;
            expect(s.size() == g.size(), "%s: sent %d elements, got %d: %s", path, s.size(), g.size(), g);
            for (int j = 0; j < s.size(); j++) {
                sameValue(path + "[" + j + "]", s.get(j), g.get(j));
            }
        } else if (sent instanceof byte[]) {
            expect(got instanceof byte[] && Arrays.equals((byte[]) sent, (byte[]) got),
                    "%s: sent %s, got %s", path, show(sent), show(got));
        } else {
            expect(got.getClass() == sent.getClass() && sent.equals(got), "%s: sent %s, got %s", path, show(sent), show(got));
        }
    }

    static void sameProp(String what, Object sent, Object got) throws CheckFailure {
        expect(sent == null ? got == null : sent.equals(got), "%s: sent %s, got %s", what, show(sent), show(got));
    }

    static void sameProps(String msg, AMQP.BasicProperties s, AMQP.BasicProperties g) throws CheckFailure {
        sameProp(msg + " content-type", s.getContentType(), g.getContentType());
        sameProp(msg + " content-encoding", s.getContentEncoding(), g.getContentEncoding());
        sameProp(msg + " delivery-mode", s.getDeliveryMode(), g.getDeliveryMode());
        sameProp(msg + " priority", s.getPriority(), g.getPriority());
        sameProp(msg + " correlation-id", s.getCorrelationId(), g.getCorrelationId());
        sameProp(msg + " reply-to", s.getReplyTo(), g.getReplyTo());
        sameProp(msg + " expiration", s.getExpiration(), g.getExpiration());
        sameProp(msg + " message-id", s.getMessageId(), g.getMessageId());
        sameProp(msg + " timestamp", s.getTimestamp(), g.getTimestamp());
        sameProp(msg + " type", s.getType(), g.getType());
        sameProp(msg + " user-id", s.getUserId(), g.getUserId());
        sameProp(msg + " app-id", s.getAppId(), g.getAppId());
        sameValue(msg + " headers", s.getHeaders(), g.getHeaders());
    }

    /** Persistent messages with every property, confirmed on one node, consumed in order on another. */
    static void confirmsAndProperties() throws Exception {
        final String q = "java-props";
        final int n = 300;
        long baseSec = System.currentTimeMillis() / 1000;
        try (Clients clients = new Clients()) {
            Channel pub = clients.to(0, "java-props-pub").createChannel();
            pub.queueDeclare(q, true, false, false, null);
            pub.confirmSelect();
            List<AMQP.BasicProperties> sent = new ArrayList<>();
            for (int i = 0; i < n; i++) {
                AMQP.BasicProperties p = richProps(i, baseSec);
                sent.add(p);
                pub.basicPublish("", q, p, utf8("{\"body\":" + i + "}"));
            }
            pub.waitForConfirmsOrDie(WAIT_MS);

            Channel sub = clients.to(1, "java-props-sub").createChannel();
            sub.basicQos(50);
            Inbox in = new Inbox(sub);
            sub.basicConsume(q, false, in);
            for (int i = 0; i < n; i++) {
                Delivery d = in.next("message " + i + " of " + n);
                String want = "{\"body\":" + i + "}";
                expect(want.equals(text(d)), "delivery %d: body %s, want %s (lost or out of order)", i, text(d), want);
                Envelope e = d.getEnvelope();
                expect(e.getExchange().equals("") && e.getRoutingKey().equals(q) && !e.isRedeliver(),
                        "delivery %d: exchange \"%s\", routing key \"%s\", redelivered %b; want \"\", \"%s\", false",
                        i, e.getExchange(), e.getRoutingKey(), e.isRedeliver(), q);
                sameProps("message " + i, sent.get(i), d.getProperties());
                sub.basicAck(e.getDeliveryTag(), false);
            }
        }
    }

    /** Checks an x-death header of one death as the client decodes it. */
    static void checkDeath(Delivery d, String reason, String queue) throws CheckFailure {
        Map<String, Object> h = d.getProperties().getHeaders();
        expect(h != null, "dead-lettered message without headers");
        Object xd = h.get("x-death");
        expect(xd instanceof List, "x-death is %s, want a List", show(xd));
        List<?> deaths = (List<?>) xd;
        expect(deaths.size() == 1, "x-death has %d entries, want 1: %s", deaths.size(), deaths);
        expect(deaths.get(0) instanceof Map, "x-death[0] is %s, want a Map", show(deaths.get(0)));
        Map<?, ?> death = (Map<?, ?>) deaths.get(0);
        Object count = death.get("count");
        expect(count instanceof Long && (Long) count == 1L, "x-death[0].count is %s, want Long 1", show(count));
        sameValue("x-death[0].reason", reason, death.get("reason"));
        sameValue("x-death[0].queue", queue, death.get("queue"));
        sameValue("x-death[0].exchange", "", death.get("exchange"));
        sameValue("x-death[0].routing-keys", Arrays.asList(queue), death.get("routing-keys"));
        expect(death.get("time") instanceof Date, "x-death[0].time is %s, want a Date", show(death.get("time")));
        sameValue("x-first-death-reason", reason, h.get("x-first-death-reason"));
        sameValue("x-first-death-queue", queue, h.get("x-first-death-queue"));
        sameValue("x-first-death-exchange", "", h.get("x-first-death-exchange"));
    }

    static void acksQosNackReject() throws Exception {
        final String q = "java-work";
        final String dlx = "java-work-dlx";
        final String dead = "java-work-dead";
        final int n = 30;
        final int prefetch = 5;
        try (Clients clients = new Clients()) {
            Channel setup = clients.to(0, "java-work-pub").createChannel();
            setup.exchangeDeclare(dlx, "fanout", true);
            setup.queueDeclare(dead, true, false, false, null);
            setup.queueBind(dead, dlx, "");
            Map<String, Object> args = new HashMap<>();
            args.put("x-dead-letter-exchange", dlx);
            setup.queueDeclare(q, true, false, false, args);
            setup.confirmSelect();
            for (int i = 0; i < n; i++) {
                setup.basicPublish("", q, persistent("w-" + i), utf8("w-" + i));
            }
            setup.waitForConfirmsOrDie(WAIT_MS);

            Channel ch = clients.to(2, "java-work-sub").createChannel();
            ch.basicQos(prefetch);
            Inbox in = new Inbox(ch);
            ch.basicConsume(q, false, in);
            List<Delivery> first = new ArrayList<>();
            for (int i = 0; i < prefetch; i++) {
                Delivery d = in.next("w-" + i);
                expect(text(d).equals("w-" + i) && !d.getEnvelope().isRedeliver(),
                        "delivery %d: %s redelivered %b, want w-%d not redelivered", i, text(d), d.getEnvelope().isRedeliver(), i);
                first.add(d);
            }
            // The only wait for something not to happen: a consumer at its
            // prefetch limit must get nothing more until it settles one.
            Delivery over = in.deliveries.poll(1, TimeUnit.SECONDS);
            expect(over == null, "basicQos(%d): a delivery beyond the prefetch arrived with %d unacked: %s",
                    prefetch, prefetch, over == null ? "" : text(over));

            int settled = 0;
            ch.basicAck(first.get(0).getEnvelope().getDeliveryTag(), false);
            settled++;
            Delivery sixth = in.next("w-5 after one ack");
            expect(text(sixth).equals("w-5"), "after acking w-0: got %s, want w-5", text(sixth));
            int received = prefetch + 1;

            ch.basicReject(first.get(2).getEnvelope().getDeliveryTag(), false);
            settled++;
            ch.basicNack(first.get(1).getEnvelope().getDeliveryTag(), false, true);
            settled++;
            List<Delivery> unacked = new ArrayList<>(first.subList(3, prefetch));
            unacked.add(sixth);
            for (Delivery d : unacked) {
                ch.basicAck(d.getEnvelope().getDeliveryTag(), false);
                settled++;
            }

            // Every message but the rejected w-2 is consumed once more,
            // w-1 flagged redelivered, the rest not.
            Set<String> seen = new HashSet<>();
            for (int i = 0; i < prefetch + 1; i++) {
                seen.add("w-" + i);
            }
            seen.remove("w-2");
            boolean w1Back = false;
            while (!w1Back || seen.size() < n - 1) {
                Delivery d = in.next("the rest of " + q + " (seen " + seen.size() + " of " + (n - 1) + ", w-1 back " + w1Back + ")");
                received++;
                expect(received - settled <= prefetch, "basicQos(%d): %d deliveries unacked", prefetch, received - settled);
                String id = text(d);
                boolean redelivered = d.getEnvelope().isRedeliver();
                expect(!id.equals("w-2"), "w-2, rejected without requeue, was delivered again (redelivered %b)", redelivered);
                if (id.equals("w-1")) {
                    expect(!w1Back, "w-1 delivered a third time");
                    expect(redelivered, "w-1, nacked with requeue, came back with isRedeliver() false");
                    w1Back = true;
                } else {
                    expect(!redelivered, "%s delivered with isRedeliver() true, it was never requeued", id);
                    expect(seen.add(id), "%s delivered twice", id);
                }
                ch.basicAck(d.getEnvelope().getDeliveryTag(), false);
                settled++;
            }

            Channel dch = clients.to(0, "java-work-dead").createChannel();
            Inbox deadIn = new Inbox(dch);
            dch.basicConsume(dead, false, deadIn);
            Delivery d = deadIn.next("the rejected w-2 from " + dead);
            expect(text(d).equals("w-2"), "dead-lettered %s, want w-2", text(d));
            sameProp("dead-lettered message-id", "w-2", d.getProperties().getMessageId());
            sameProp("dead-lettered exchange", dlx, d.getEnvelope().getExchange());
            checkDeath(d, "rejected", q);
            dch.basicAck(d.getEnvelope().getDeliveryTag(), false);
        }
    }

    static void ttlDeadLetter() throws Exception {
        final String q = "java-ttl";
        final String dlx = "java-ttl-dlx";
        final String dead = "java-ttl-dead";
        final int ttlMs = 1000;
        try (Clients clients = new Clients()) {
            Channel setup = clients.to(1, "java-ttl-setup").createChannel();
            setup.exchangeDeclare(dlx, "fanout", true);
            setup.queueDeclare(dead, true, false, false, null);
            setup.queueBind(dead, dlx, "");
            Map<String, Object> args = new HashMap<>();
            args.put("x-message-ttl", ttlMs);
            args.put("x-dead-letter-exchange", dlx);
            setup.queueDeclare(q, true, false, false, args);

            Channel dch = clients.to(2, "java-ttl-dead").createChannel();
            Inbox in = new Inbox(dch);
            dch.basicConsume(dead, false, in);

            Channel pub = clients.to(0, "java-ttl-pub").createChannel();
            pub.confirmSelect();
            long startNanos = System.nanoTime();
            long startMillis = System.currentTimeMillis();
            pub.basicPublish("", q, persistent("ttl-1"), utf8("expires"));
            pub.waitForConfirmsOrDie(WAIT_MS);
            Delivery d = in.next("the expired message from " + dead);
            // The broker times expiry by wall clocks, so a step of this
            // machine's clock shortens one of the two readings; it is early
            // only when both say so.
            long took = Math.max(TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - startNanos),
                    System.currentTimeMillis() - startMillis);
            expect(text(d).equals("expires"), "dead-lettered body %s, want expires", text(d));
            expect(took >= ttlMs, "dead-lettered %d ms after the publish, before the queue's TTL of %d ms", took, ttlMs);
            sameProp("dead-lettered expiration", null, d.getProperties().getExpiration());
            checkDeath(d, "expired", q);
            dch.basicAck(d.getEnvelope().getDeliveryTag(), false);
        }
    }

    static void directReplyTo() throws Exception {
        final String q = "java-rpc";
        final String replyTo = "amq.rabbitmq.reply-to";
        try (Clients clients = new Clients()) {
            Channel server = clients.to(1, "java-rpc-server").createChannel();
            server.queueDeclare(q, false, false, false, null);
            BlockingQueue<String> replyTos = new LinkedBlockingQueue<>();
            server.basicConsume(q, false, new DefaultConsumer(server) {
                @Override
                public void handleDelivery(String tag, Envelope env, AMQP.BasicProperties props, byte[] body) throws IOException {
                    replyTos.add(String.valueOf(props.getReplyTo()));
                    AMQP.BasicProperties reply = new AMQP.BasicProperties.Builder()
                            .correlationId(props.getCorrelationId()).build();
                    getChannel().basicPublish("", props.getReplyTo(), reply,
                            utf8("re:" + new String(body, StandardCharsets.UTF_8)));
                    getChannel().basicAck(env.getDeliveryTag(), false);
                }
            });

            Channel client = clients.to(0, "java-rpc-client").createChannel();
            Inbox replies = new Inbox(client);
            client.basicConsume(replyTo, true, replies);
            for (int i = 0; i < 3; i++) {
                String corr = "rpc-" + i;
                AMQP.BasicProperties props = new AMQP.BasicProperties.Builder()
                        .correlationId(corr).replyTo(replyTo).build();
                client.basicPublish("", q, props, utf8("ping-" + i));
                String seenReplyTo = replyTos.poll(WAIT_S, TimeUnit.SECONDS);
                expect(seenReplyTo != null, "request %s not delivered to the server within %d s", corr, WAIT_S);
                expect(seenReplyTo.startsWith(replyTo + "."),
                        "the server saw reply-to \"%s\", want the broker's %s.<id> name", seenReplyTo, replyTo);
                Delivery d = replies.next("the reply to " + corr);
                sameProp("reply correlation-id", corr, d.getProperties().getCorrelationId());
                expect(text(d).equals("re:ping-" + i), "reply body %s, want re:ping-%d", text(d), i);
            }
        }
    }

    /** The channel.close a refused operation threw, or a failure naming what was thrown. */
    static AMQP.Channel.Close channelClose(String op, Exception e) throws CheckFailure {
        Throwable c = e;
        while (c != null && !(c instanceof ShutdownSignalException)) {
            c = c.getCause();
        }
        expect(c != null, "%s threw %s without a ShutdownSignalException", op, e);
        ShutdownSignalException s = (ShutdownSignalException) c;
        Method reason = s.getReason();
        expect(!s.isHardError() && reason instanceof AMQP.Channel.Close,
                "%s: the broker answered %s (hard error %b), want channel.close", op, reason, s.isHardError());
        return (AMQP.Channel.Close) reason;
    }

    static void refusals() throws Exception {
        final String missing = "java-no-such-queue";
        final String q = "java-args";
        try (Clients clients = new Clients()) {
            Connection conn = clients.to(2, "java-refusals");
            Channel ch = conn.createChannel();
            try {
                ch.queueDeclarePassive(missing);
                fail("queueDeclarePassive(%s) of a missing queue succeeded", missing);
            } catch (IOException e) {
                AMQP.Channel.Close close = channelClose("queueDeclarePassive(" + missing + ")", e);
                expect(close.getReplyCode() == 404 && close.getReplyText().startsWith("NOT_FOUND"),
                        "queueDeclarePassive(%s): channel.close %d %s, want 404 NOT_FOUND",
                        missing, close.getReplyCode(), close.getReplyText());
            }
            expect(!ch.isOpen(), "the channel is still open after the 404");
            expect(conn.isOpen(), "the connection closed after a channel-level 404");

            Map<String, Object> args = new HashMap<>();
            args.put("x-max-length", 10);
            conn.createChannel().queueDeclare(q, true, false, false, args);

            // The refusal of a mismatched redeclare must hold on any node.
            Connection other = clients.to(0, "java-refusals-other");
            Map<String, Object> different = new HashMap<>();
            different.put("x-max-length", 20);
            Channel och = other.createChannel();
            try {
                och.queueDeclare(q, true, false, false, different);
                fail("redeclaring %s with x-max-length 20 (declared with 10) succeeded", q);
            } catch (IOException e) {
                AMQP.Channel.Close close = channelClose("queueDeclare(" + q + ") with other arguments", e);
                expect(close.getReplyCode() == 406 && close.getReplyText().startsWith("PRECONDITION_FAILED"),
                        "redeclare with other arguments: channel.close %d %s, want 406 PRECONDITION_FAILED",
                        close.getReplyCode(), close.getReplyText());
            }
            expect(other.isOpen(), "the connection closed after a channel-level 406");
            AMQP.Queue.DeclareOk ok = other.createChannel().queueDeclare(q, true, false, false, args);
            sameProp("redeclare with the same arguments", q, ok.getQueue());
        }
    }

    static void largeBody() throws Exception {
        final String q = "java-large";
        byte[] body = new byte[1 << 20];
        new Random(1).nextBytes(body);
        try (Clients clients = new Clients()) {
            Channel pub = clients.to(2, "java-large-pub").createChannel();
            pub.queueDeclare(q, true, false, false, null);
            pub.confirmSelect();
            pub.basicPublish("", q, persistent("large"), body);
            pub.waitForConfirmsOrDie(WAIT_MS);
            Channel sub = clients.to(1, "java-large-sub").createChannel();
            Inbox in = new Inbox(sub);
            sub.basicConsume(q, false, in);
            Delivery d = in.next("the 1 MiB message");
            expect(d.getBody().length == body.length, "body of %d bytes, want %d", d.getBody().length, body.length);
            int at = Arrays.mismatch(body, d.getBody());
            expect(at < 0, "the 1 MiB body differs from byte %d on", at);
            sub.basicAck(d.getEnvelope().getDeliveryTag(), false);
        }
    }

    /**
     * What a consumer of the recovering connection received, by message
     * id. With acks on it acks in batches, as Java consumers often do, so
     * that a kill finds deliveries unacked; hold() stops acking, and
     * recovering() keeps what was unacked when the node died: the broker
     * must deliver those again, flagged, to the recovered consumer.
     */
    static final class Tracker extends DefaultConsumer {
        static final int ACK_BATCH = 10;

        final boolean ack;
        final Map<String, List<Boolean>> redeliveredFlags = new HashMap<>();
        final List<String> unacked = new ArrayList<>();
        final Set<String> redeliveredAfterRecovery = new HashSet<>();
        Set<String> lostWithTheNode;
        boolean holding;

        Tracker(Channel ch, boolean ack) {
            super(ch);
            this.ack = ack;
        }

        @Override
        public synchronized void handleDelivery(String tag, Envelope env, AMQP.BasicProperties props, byte[] body) {
            String id = new String(body, StandardCharsets.UTF_8);
            redeliveredFlags.computeIfAbsent(id, k -> new ArrayList<>()).add(env.isRedeliver());
            if (lostWithTheNode != null && env.isRedeliver()) {
                redeliveredAfterRecovery.add(id);
            }
            if (ack) {
                unacked.add(id);
                // Acking under the lock: once hold() returns no ack is on its way.
                if (!holding && (unacked.size() >= ACK_BATCH || lostWithTheNode != null)) {
                    try {
                        getChannel().basicAck(env.getDeliveryTag(), true);
                        unacked.clear();
                    } catch (IOException | RuntimeException e) {
                        // The connection went down: the broker delivers
                        // these again to the recovered consumer.
                    }
                }
            }
            notifyAll();
        }

        /** Stops acking and waits until a delivery is left unacked. */
        synchronized boolean hold() throws InterruptedException {
            holding = true;
            return awaitCond(() -> !unacked.isEmpty());
        }

        /**
         * Called as recovery starts, before a new connection can deliver:
         * what is unacked now was unacked when the node died.
         */
        synchronized void recovering() {
            if (lostWithTheNode == null) {
                lostWithTheNode = new HashSet<>(unacked);
                unacked.clear();
                holding = false;
            }
        }

        synchronized boolean awaitCond(java.util.function.BooleanSupplier cond) throws InterruptedException {
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(WAIT_S);
            while (!cond.getAsBoolean()) {
                long left = deadline - System.nanoTime();
                if (left <= 0) {
                    return false;
                }
                TimeUnit.NANOSECONDS.timedWait(this, left);
            }
            return true;
        }

        synchronized int distinct() {
            return redeliveredFlags.size();
        }

        /** Waits until every id was received; returns those still missing. */
        synchronized List<String> awaitAll(List<String> ids) throws InterruptedException {
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(WAIT_S);
            while (true) {
                List<String> missing = new ArrayList<>();
                for (String id : ids) {
                    if (!redeliveredFlags.containsKey(id)) {
                        missing.add(id);
                    }
                }
                long left = deadline - System.nanoTime();
                if (missing.isEmpty() || left <= 0) {
                    return missing;
                }
                TimeUnit.NANOSECONDS.timedWait(this, left);
            }
        }
    }

    /**
     * Publishes batches with confirms until stopped. A batch that fails
     * while the node is down is unconfirmed (it may or may not arrive);
     * the publisher then waits for the connection's recovery.
     */
    static final class Publisher extends Thread {
        final Channel ch;
        final String queue;
        final CountDownLatch killed;
        final CountDownLatch recovered;
        final List<String> confirmed = new ArrayList<>();
        final List<String> unconfirmed = new ArrayList<>();
        int confirmedBeforeKill;
        int confirmedAfterRecovery;
        int seq;
        volatile boolean stop;
        volatile String error;

        Publisher(Channel ch, String queue, CountDownLatch killed, CountDownLatch recovered) {
            super("publisher");
            this.ch = ch;
            this.queue = queue;
            this.killed = killed;
            this.recovered = recovered;
        }

        @Override
        public void run() {
            try {
                while (!stop) {
                    List<String> batch = new ArrayList<>();
                    boolean afterRecovery = recovered.getCount() == 0;
                    try {
                        for (int i = 0; i < 10; i++) {
                            String id = "r-" + seq++;
                            batch.add(id);
                            ch.basicPublish("", queue, persistent(id), utf8(id));
                        }
                        ch.waitForConfirmsOrDie(WAIT_MS);
                        synchronized (this) {
                            confirmed.addAll(batch);
                            if (killed.getCount() == 1) {
                                confirmedBeforeKill += batch.size();
                            }
                            if (afterRecovery) {
                                confirmedAfterRecovery += batch.size();
                            }
                            notifyAll();
                        }
                    } catch (IOException | TimeoutException | ShutdownSignalException e) {
                        synchronized (this) {
                            unconfirmed.addAll(batch);
                        }
                        if (killed.getCount() == 1 || afterRecovery) {
                            error = "publishing with confirms failed " + (afterRecovery ? "after the recovery" : "before the node was killed")
                                    + ": " + e;
                            return;
                        }
                        if (!recovered.await(WAIT_S, TimeUnit.SECONDS)) {
                            error = "the connection did not recover within " + WAIT_S + " s of a failed publish (" + e + ")";
                            return;
                        }
                    }
                }
            } catch (InterruptedException e) {
                error = "interrupted";
            } finally {
                synchronized (this) {
                    stop = true;
                    notifyAll();
                }
            }
        }

        /** Waits until cond holds for this publisher or it stopped. */
        synchronized boolean await(java.util.function.BooleanSupplier cond) throws InterruptedException {
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(WAIT_S);
            while (!cond.getAsBoolean() && !stop) {
                long left = deadline - System.nanoTime();
                if (left <= 0) {
                    return false;
                }
                TimeUnit.NANOSECONDS.timedWait(this, left);
            }
            return cond.getAsBoolean();
        }
    }

    static void recovery() throws Exception {
        final String q = "java-recover";
        final String fanout = "java-recover-fanout";
        ConnectionFactory f = new ConnectionFactory();
        f.setAutomaticRecoveryEnabled(true);
        f.setTopologyRecoveryEnabled(true);
        f.setNetworkRecoveryInterval(1000);
        f.setChannelRpcTimeout((int) WAIT_MS);
        f.setExceptionHandler(new DefaultExceptionHandler() {
            @Override
            public void handleConnectionRecoveryException(Connection conn, Throwable e) {
                System.err.println("client: a recovery attempt failed (it retries): " + e);
            }

            @Override
            public void handleTopologyRecoveryException(Connection conn, Channel ch, TopologyRecoveryException e) {
                System.err.println("client: topology recovery failed: " + e + " caused by " + e.getCause());
            }
        });
        Connection conn = f.newConnection(Arrays.asList(nodes), "java-recovery");
        try {
            int port = conn.getPort();
            say("recovery: connected to port %d", port);

            Channel cch = conn.createChannel();
            cch.queueDeclare(q, true, false, false, null);
            cch.basicQos(50);
            Tracker tracker = new Tracker(cch, true);
            cch.basicConsume(q, false, tracker);

            CountDownLatch killed = new CountDownLatch(1);
            CountDownLatch recovered = new CountDownLatch(1);
            ((Recoverable) conn).addRecoveryListener(new RecoveryListener() {
                @Override
                public void handleRecovery(Recoverable r) {
                    recovered.countDown();
                }

                @Override
                public void handleRecoveryStarted(Recoverable r) {
                    tracker.recovering();
                }
            });

            // A server-named exclusive queue bound to a fanout exchange, as
            // a Java subscriber declares one: recovery declares it anew
            // under a new name and binds and consumes that.
            Channel xch = conn.createChannel();
            xch.exchangeDeclare(fanout, "fanout", true);
            String tmp = xch.queueDeclare().getQueue();
            xch.queueBind(tmp, fanout, "");
            Tracker fanned = new Tracker(xch, false);
            xch.basicConsume(tmp, true, fanned);

            Channel pch = conn.createChannel();
            pch.confirmSelect();
            List<String> fanIds = new ArrayList<>();
            for (int i = 0; i < 5; i++) {
                fanIds.add("fan-before-" + i);
                pch.basicPublish(fanout, "", null, utf8(fanIds.get(i)));
            }
            pch.waitForConfirmsOrDie(WAIT_MS);
            List<String> missing = fanned.awaitAll(fanIds);
            expect(missing.isEmpty(), "before the kill, the fanout subscriber did not get %s", missing);

            Publisher pub = new Publisher(pch, q, killed, recovered);
            pub.start();
            expect(pub.await(() -> pub.confirmed.size() >= 100), "before the kill: %d confirmed, want 100 (%s)",
                    pub.confirmed.size(), pub.error);
            expect(tracker.awaitCond(() -> tracker.redeliveredFlags.size() >= 50), "before the kill: %d consumed, want 50",
                    tracker.distinct());
            expect(tracker.hold(), "before the kill: no delivery left unacked with acks held");

            BufferedReader stdin = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
            // Before asking: the publisher may see the kill before the answer.
            killed.countDown();
            say("KILL %d", port);
            String answer = stdin.readLine();
            expect("KILLED".equals(answer), "the caller answered \"%s\" to KILL %d, want KILLED", answer, port);
            expect(recovered.await(WAIT_S, TimeUnit.SECONDS), "the connection did not recover within %d s of the kill", WAIT_S);
            int newPort = conn.getPort();
            say("recovery: recovered to port %d", newPort);
            expect(newPort != port, "recovered to the killed node's port %d", port);

            boolean published = pub.await(() -> pub.confirmedAfterRecovery >= 200);
            pub.stop = true;
            pub.join(TimeUnit.SECONDS.toMillis(WAIT_S));
            expect(!pub.isAlive(), "the publisher did not stop within %d s", WAIT_S);
            expect(pub.error == null, "%s", pub.error);
            expect(published, "after the recovery: %d confirmed, want 200", pub.confirmedAfterRecovery);

            fanIds.clear();
            for (int i = 0; i < 10; i++) {
                fanIds.add("fan-after-" + i);
                pch.basicPublish(fanout, "", null, utf8(fanIds.get(i)));
            }
            pch.waitForConfirmsOrDie(WAIT_MS);
            missing = fanned.awaitAll(fanIds);
            expect(missing.isEmpty(), "after the recovery, the fanout subscriber's recovered queue did not get %s", missing);

            missing = tracker.awaitAll(pub.confirmed);
            expect(missing.isEmpty(), "%d of %d confirmed messages never consumed, e.g. %s", missing.size(),
                    pub.confirmed.size(), missing.subList(0, Math.min(10, missing.size())));
            // Unacked deliveries of a connection that died go back to the
            // queue, flagged as redelivered.
            Set<String> lost = tracker.lostWithTheNode;
            boolean back = tracker.awaitCond(() -> tracker.redeliveredAfterRecovery.containsAll(lost));
            synchronized (tracker) {
                Set<String> notBack = new HashSet<>(lost);
                notBack.removeAll(tracker.redeliveredAfterRecovery);
                expect(back, "%d of the %d deliveries unacked when the node died were not delivered again with the "
                        + "redelivered flag: %s", notBack.size(), lost.size(), notBack);
            }

            int duplicates = 0;
            int unconfirmedArrived = 0;
            synchronized (tracker) {
                for (Map.Entry<String, List<Boolean>> e : tracker.redeliveredFlags.entrySet()) {
                    List<Boolean> flags = e.getValue();
                    long fresh = flags.stream().filter(b -> !b).count();
                    expect(fresh <= 1, "%s delivered %d times without the redelivered flag (flags %s)", e.getKey(), fresh, flags);
                    duplicates += flags.size() - 1;
                }
                for (String id : pub.unconfirmed) {
                    if (tracker.redeliveredFlags.containsKey(id)) {
                        unconfirmedArrived++;
                    }
                }
            }
            say("recovery: port %d killed, recovered to port %d; confirmed %d (%d before the kill, %d after the recovery), "
                    + "unconfirmed %d (%d of them consumed anyway); consumed %d distinct; %d unacked when the node died, "
                    + "all delivered again; %d redelivered duplicates in all (allowed: each carried the redelivered flag)",
                    port, newPort, pub.confirmed.size(), pub.confirmedBeforeKill, pub.confirmedAfterRecovery,
                    pub.unconfirmed.size(), unconfirmedArrived, tracker.distinct(), lost.size(), duplicates);
        } finally {
            conn.abort(10000);
        }
    }
}
