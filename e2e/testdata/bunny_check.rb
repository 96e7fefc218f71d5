# Drives a raftmq cluster with Bunny (Debian's ruby-bunny), the Ruby client
# with its own framing and table encoding: publishes with confirms through
# one node and consumes through another, then checks what a Ruby user relies
# on (properties and headers as Ruby types, acks, nacks, dead letters,
# returns, headers exchanges, refusals).
#
# usage: ruby bunny_check.rb PUBLISH_URL CONSUME_URL
# Exits 0 when every check passed; otherwise prints the failed check on
# stderr and exits 1.
require "bunny"
require "timeout"

def fail!(msg)
  warn "bunny check failed: #{msg}"
  exit 1
end

def check(what, got, want)
  fail!("#{what}: got #{got.inspect}, want #{want.inspect}") unless got == want
end

# Waits for the next item of q (a Queue fed by a subscription), failing the
# check when none comes: the cluster is loaded, so the bound is generous.
def take(q, what, seconds = 15)
  Timeout.timeout(seconds) { q.pop }
rescue Timeout::Error
  fail!("#{what}: nothing within #{seconds} s")
end

pub_url, cons_url = ARGV
fail!("usage: bunny_check.rb PUBLISH_URL CONSUME_URL") unless pub_url && cons_url

pub = Bunny.new(pub_url, automatically_recover: false, log_level: :warn)
pub.start
cons = Bunny.new(cons_url, automatically_recover: false, log_level: :warn)
cons.start
pch = pub.create_channel
cch = cons.create_channel

# 1. Confirms, properties and headers across nodes, in order.
pch.exchange("bunny-dlx", type: :fanout, durable: true)
pch.queue("bunny-dead", durable: true).bind("bunny-dlx")
work = pch.queue("bunny-work", durable: true,
                 arguments: { "x-dead-letter-exchange" => "bunny-dlx" })
pch.confirm_select
stamp = Time.at(1_700_000_000)
headers = {
  "str" => "text", "int" => 7, "big" => 2**40, "neg" => -3,
  "yes" => true, "no" => false, "float" => 2.5,
  "table" => { "inner" => "x", "n" => 1 },
  # No boolean in the array: amq-protocol 2.3's decoder drops one there
  # (a table encoded and decoded by it alone loses it, no broker involved).
  "list" => ["a", 1, 2.5, { "k" => "v" }, ["n"], 2**40],
}
count = 200
count.times do |i|
  pch.default_exchange.publish("body-#{i}", routing_key: "bunny-work", persistent: true,
                               content_type: "text/plain", correlation_id: "c-#{i}",
                               message_id: "m-#{i}", reply_to: "bunny-replies",
                               timestamp: stamp.to_i, priority: 3, type: "kind",
                               app_id: "bunny-check", headers: headers)
end
fail!("publishes not confirmed") unless pch.wait_for_confirms
fail!("nacked publishes: #{pch.nacked_set.to_a.inspect}") unless pch.nacked_set.empty?

cch.prefetch(20)
got = Queue.new
consumer = cch.queue("bunny-work", durable: true, passive: true).subscribe(manual_ack: true) do |info, props, body|
  got << [info, props, body]
end
count.times do |i|
  info, props, body = take(got, "delivery #{i}")
  check("body #{i}", body, "body-#{i}")
  check("redelivered #{i}", info.redelivered?, false)
  check("content type", props.content_type, "text/plain")
  check("correlation id", props.correlation_id, "c-#{i}")
  check("message id", props.message_id, "m-#{i}")
  check("reply to", props.reply_to, "bunny-replies")
  check("delivery mode", props.delivery_mode, 2)
  check("priority", props.priority, 3)
  check("type", props.type, "kind")
  check("app id", props.app_id, "bunny-check")
  check("timestamp", props.timestamp, stamp)
  check("headers", props.headers, headers)
  cch.ack(info.delivery_tag)
end
consumer.cancel

# 2. A nack with requeue comes back redelivered; a reject without requeue
# goes to the dead-letter exchange with an x-death Bunny decodes.
pch.default_exchange.publish("again", routing_key: "bunny-work", persistent: true)
pch.default_exchange.publish("refused", routing_key: "bunny-work", persistent: true)
fail!("publishes not confirmed") unless pch.wait_for_confirms
got = Queue.new
consumer = cch.queue("bunny-work", durable: true, passive: true).subscribe(manual_ack: true) do |info, props, body|
  got << [info, props, body]
end
info, _, body = take(got, "first of two")
check("first of two", body, "again")
cch.nack(info.delivery_tag, false, true)
seen = {}
2.times do
  info, _, body = take(got, "after the nack")
  seen[body] = info.redelivered?
  if body == "refused"
    cch.reject(info.delivery_tag, false)
  else
    cch.ack(info.delivery_tag)
  end
end
check("redelivered flags after the nack", seen, { "again" => true, "refused" => false })
consumer.cancel
dead_got = Queue.new
dead_consumer = cch.queue("bunny-dead", durable: true, passive: true).subscribe(manual_ack: true) do |info, props, body|
  dead_got << [info, props, body]
end
info, props, body = take(dead_got, "the dead letter")
dead_consumer.cancel
check("dead letter", body, "refused")
death = (props.headers || {})["x-death"]
fail!("x-death missing: #{props.headers.inspect}") unless death.is_a?(Array) && death[0].is_a?(Hash)
check("x-death reason", death[0]["reason"], "rejected")
check("x-death queue", death[0]["queue"], "bunny-work")
check("x-death count", death[0]["count"], 1)
fail!("x-death time #{death[0]["time"].inspect}") unless death[0]["time"].is_a?(Time)
cch.ack(info.delivery_tag)

# 3. A mandatory publish nothing routes comes back as basic.return.
returned = Queue.new
rx = pch.exchange("bunny-nowhere", type: :direct, durable: false, auto_delete: true)
rx.on_return { |ret, _props, body| returned << [ret.reply_code, ret.reply_text, body] }
rx.publish("lost", routing_key: "none", mandatory: true)
fail!("unroutable publish not confirmed") unless pch.wait_for_confirms
check("basic.return", take(returned, "basic.return"), [312, "NO_ROUTE", "lost"])

# 4. A headers exchange routes by x-match.
hx = pch.exchange("bunny-headers", type: :headers, durable: true)
all_q = pch.queue("bunny-h-all", durable: true).bind(hx, arguments: { "x-match" => "all", "a" => "1", "b" => "2" })
any_q = pch.queue("bunny-h-any", durable: true).bind(hx, arguments: { "x-match" => "any", "a" => "1", "b" => "2" })
hx.publish("both", headers: { "a" => "1", "b" => "2" })
hx.publish("one", headers: { "a" => "1" })
fail!("header publishes not confirmed") unless pch.wait_for_confirms
check("x-match all", pch.queue("bunny-h-all", durable: true, passive: true).message_count, 1)
check("x-match any", pch.queue("bunny-h-any", durable: true, passive: true).message_count, 2)
all_q.delete
any_q.delete

# 5. Refusals as RabbitMQ gives them: a passive declare of a missing queue
# closes the channel with 404; a redeclare with other arguments with 406;
# the connection goes on.
begin
  cons.create_channel.queue("bunny-missing", passive: true)
  fail!("passive declare of a missing queue succeeded")
rescue Bunny::NotFound => e
  fail!("404 text: #{e.message}") unless e.message.include?("NOT_FOUND - no queue 'bunny-missing' in vhost '/'")
end
begin
  cons.create_channel.queue("bunny-work", durable: true, arguments: { "x-message-ttl" => 5 })
  fail!("redeclare with other arguments succeeded")
rescue Bunny::PreconditionFailed => e
  fail!("406 text: #{e.message}") unless e.message.include?("PRECONDITION_FAILED")
end
ch = cons.create_channel
check("queue after refusals", ch.queue("bunny-work", durable: true, passive: true).message_count, 0)

# 6. A 1 MiB body through the other node.
big = Random.new(7).bytes(1 << 20)
pch.default_exchange.publish(big, routing_key: "bunny-work", persistent: true)
fail!("1 MiB publish not confirmed") unless pch.wait_for_confirms
big_got = Queue.new
big_consumer = ch.queue("bunny-work", durable: true, passive: true).subscribe(manual_ack: true) do |info, props, body|
  big_got << [info, props, body]
end
info, _, body = take(big_got, "the 1 MiB message")
check("1 MiB body size", body.bytesize, big.bytesize)
fail!("1 MiB body differs") unless body == big
ch.ack(info.delivery_tag)
big_consumer.cancel

pch.queue("bunny-work", durable: true, passive: true).delete
pch.queue("bunny-dead", durable: true, passive: true).delete
pub.close
cons.close
puts "bunny: #{count} messages with properties, nack, dead letter, return, headers exchange, refusals, 1 MiB"
