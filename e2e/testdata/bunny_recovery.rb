# A Ruby user's failover: Bunny with the addresses of every node and its
# automatic recovery, publishing with confirms and consuming with manual
# acks on one connection, while the node it is connected to is killed.
#
# usage: ruby bunny_recovery.rb ADDRESS...   (host:port of every node)
# After the first third of the messages is confirmed it prints
# "KILL <port>" (the node it is on) and waits for "KILLED" on stdin, sent
# once that node is dead. Exits 0 when every confirmed message was
# consumed, and a message came twice only where its publish was repeated
# or the repeat carried the redelivered flag.
require "bunny"
require "set"
require "timeout"

def fail!(msg)
  warn "bunny recovery failed: #{msg}"
  exit 1
end

addresses = ARGV
fail!("usage: bunny_recovery.rb ADDRESS...") if addresses.empty?
$stdout.sync = true

conn = Bunny.new(addresses: addresses, user: "guest", pass: "guest", vhost: "/",
                 automatically_recover: true, network_recovery_interval: 0.5,
                 recovery_attempts: nil, continuation_timeout: 5_000, log_level: :fatal)
conn.start

total = 300
mu = Mutex.new
seen = Hash.new(0)     # body => times delivered
flagged = Set.new      # bodies delivered again with the redelivered flag
all_in = ConditionVariable.new

recovered = 0
conn.after_recovery_completed { mu.synchronize { recovered += 1; all_in.broadcast } }

cch = conn.create_channel
cch.prefetch(50)
q = cch.queue("bunny-recovery", durable: true)
q.subscribe(manual_ack: true) do |info, _props, body|
  mu.synchronize do
    seen[body] += 1
    flagged << body if info.redelivered?
    all_in.broadcast
  end
  begin
    cch.ack(info.delivery_tag)
  rescue Bunny::ConnectionClosedError, Bunny::ChannelAlreadyClosed
    # The ack is lost with the connection: the message comes back,
    # redelivered, after the recovery.
  end
end

pch = conn.create_channel
pch.confirm_select
confirmed = []
repeated = Set.new # bodies published more than once
killed = false
batch = 10
(0...total).each_slice(batch) do |ids|
  bodies = ids.map { |i| "m-#{i}" }
  attempts = 0
  begin
    attempts += 1
    recoveries = mu.synchronize { recovered }
    bodies.each { |b| pch.default_exchange.publish(b, routing_key: "bunny-recovery", persistent: true) }
    raise "nacked" unless pch.wait_for_confirms
    confirmed.concat(bodies)
  rescue StandardError, Timeout::Error => e
    fail!("batch #{bodies.first} not confirmed after #{attempts} attempts: #{e.class}: #{e.message}") if attempts >= 20
    repeated.merge(bodies)
    # Publishes meet the closed connection until the recovery has
    # reopened it: wait for the next recovery (a failure with the
    # connection open tries again after the bound).
    mu.synchronize do
      until_t = Time.now + 5
      all_in.wait(mu, until_t - Time.now) while recovered <= recoveries && Time.now < until_t
    end
    # Bunny 2.19 counts a recovered channel's multiple acks from its
    # offset twice (Channel#handle_ack_or_nack), so it never sees them and
    # wait_for_confirms runs into its timeout; a channel opened after the
    # recovery starts without an offset.
    begin
      pch.close if pch.open?
    rescue StandardError
      # Closing what the failure left is best effort.
    end
    pch = conn.create_channel
    pch.confirm_select
    retry
  end
  next if killed || confirmed.size < total / 3
  puts "KILL #{conn.port}"
  answer = $stdin.gets
  fail!("the caller answered #{answer.inspect} to KILL") unless answer&.strip == "KILLED"
  killed = true
end

deadline = Time.now + 45
mu.synchronize do
  until confirmed.all? { |b| seen[b] > 0 }
    left = deadline - Time.now
    missing = confirmed.reject { |b| seen[b] > 0 }
    fail!("#{missing.size} confirmed messages never consumed, e.g. #{missing.first(5)}") if left <= 0
    all_in.wait(mu, left)
  end
  twice = seen.select { |b, n| n > 1 && !repeated.include?(b) && !flagged.include?(b) }.keys
  fail!("consumed twice without the redelivered flag: #{twice.first(5)}") unless twice.empty?
  puts "bunny recovery: #{confirmed.size} confirmed, #{seen.size} consumed, " \
       "#{repeated.size} published again, #{flagged.size} redelivered, now on port #{conn.port}"
end
conn.close
