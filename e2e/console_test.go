package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	amqp "github.com/rabbitmq/amqp091-go"
)

// chromiumPath is the browser the console tests drive: Debian's chromium
// (or another Chromium-based browser on PATH).
func chromiumPath() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// artifactsDir is where the console tests save their screenshots:
// $RAFTMQ_E2E_ARTIFACTS when set (CI keeps it), else the test's temporary
// directory.
func artifactsDir(t *testing.T) string {
	if d := os.Getenv("RAFTMQ_E2E_ARTIFACTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// browser is one headless chromium tab whose console is watched: every
// console error, browser-log error and uncaught exception of the page is
// kept, and the test fails on any of them unless it expected them.
type browser struct {
	t   *testing.T
	ctx context.Context
	dir string // where screenshots go

	mu       sync.Mutex
	problems []string
	// refused is the HTTP status a step expects the API to answer (a
	// wrong password, a refused declare): chromium logs such answers as
	// errors of its own, which the step then does not count.
	refused int
}

func newBrowser(t *testing.T, dir string) *browser {
	t.Helper()
	path := chromiumPath()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.WindowSize(1440, 1000),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-gpu", true),
	)
	if os.Geteuid() == 0 {
		// Chromium refuses to run as root with its sandbox on.
		opts = append(opts, chromedp.NoSandbox)
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	b := &browser{t: t, ctx: ctx, dir: dir}
	// Start the browser now, with no deadline: a deadline on the first run
	// would end the browser with it.
	if err := chromedp.Do(ctx); err != nil {
		cancel()
		cancelAlloc()
		t.Fatalf("starting %s: %v", path, err)
	}
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			bad := m.IsException() || m.Type == chromedp.ConsoleError
			b.mu.Lock()
			if bad && b.refused != 0 && m.Source == "network" && strings.Contains(m.Text, fmt.Sprintf("status of %d", b.refused)) {
				bad = false
			}
			if bad {
				b.problems = append(b.problems, fmt.Sprintf("%s (%s:%d)", m, m.URL, m.Line+1))
			}
			b.mu.Unlock()
		}
	}()
	return b
}

// run runs the steps within a minute, failing the test with what went
// wrong in the page.
func (b *browser) run(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		text, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.body.innerText`))
		b.screenshot("failed")
		b.t.Fatalf("%s: %v\nconsole: %v\npage:\n%s", what, err, b.seen(), text)
	}
	b.check(what)
}

func (b *browser) seen() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.problems...)
}

// check fails the test on any console error or exception seen so far.
func (b *browser) check(what string) {
	b.t.Helper()
	if p := b.seen(); len(p) > 0 {
		b.t.Fatalf("after %s, the page reported: %s", what, strings.Join(p, "; "))
	}
}

// expectRefusal lets the next steps see the API answer status (0: none).
func (b *browser) expectRefusal(status int) {
	b.mu.Lock()
	b.refused = status
	b.mu.Unlock()
}

// screenshot saves the whole page as name.png and logs the path.
func (b *browser) screenshot(name string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	// From the top: the page's sticky header would otherwise be drawn
	// where the window last scrolled to.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[chromedp.Void](`window.scrollTo(0, 0)`)); err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(b.dir, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot: %s", path)
}

// until waits for a JavaScript condition of the page; one that cannot be
// evaluated yet (its element is not there) is not met.
func until(cond string) chromedp.Action[chromedp.Void] {
	return chromedp.Poll[chromedp.Void]("(() => { try { return ("+cond+"); } catch (e) { return false; } })()",
		chromedp.WithPollingInterval(50*time.Millisecond))
}

// setValue sets the value of the form field sel selects, as a user's
// choice would (with its input and change events).
func setValue(sel, value string) chromedp.Action[chromedp.Void] {
	js := fmt.Sprintf(`(() => { const e = document.querySelector(%s); e.value = %s;
		e.dispatchEvent(new Event('input', {bubbles: true})); e.dispatchEvent(new Event('change', {bubbles: true})); return e.value === %[2]s; })()`,
		strconv.Quote(sel), strconv.Quote(value))
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		ok, err := chromedp.Evaluate[bool](js)(ctx, t)
		if err == nil && !ok {
			err = fmt.Errorf("%s cannot take the value %q", sel, value)
		}
		return chromedp.Void{}, err
	}
}

// TestConsole drives the web console of a three-node cluster's follower in
// headless chromium: a wrong password is refused on the login form, the
// right one logs in, the overview shows the three raft members with each
// one's own memory, disk, file descriptors and uptime, a queue is added
// from the queue list, and a message is published to it and got back
// through the queue's page, whose charts then show the publish and the
// delivery; the overview's charts show publishes, deliveries, acks and
// dead-lettered messages; the channel list shows a consumer's channel, a
// virtual host is added and deleted on the admin page; the other pages
// render, and a client's connection is closed from the connection list.
// The page must log no error and throw nothing.
//
// RAFTMQ_E2E_CONSOLE_QUEUES=10000 first declares that many more queues,
// times the API's first page of them and screenshots the queue list's
// first page sorted by depth.
func TestConsole(t *testing.T) {
	if chromiumPath() == "" {
		t.Skip("chromium is not installed (Debian: apt-get install chromium): the web console is not tested in a browser")
	}
	c := StartCluster(t, 3)
	node := followerOf(t, c)
	extra, _ := strconv.Atoi(os.Getenv("RAFTMQ_E2E_CONSOLE_QUEUES"))
	// 25 queues make two pages of 20 in the queue list.
	bulk := 25 + max(extra, 0)
	declareQueues(t, node, bulk)
	if extra > 0 {
		start := time.Now()
		req, _ := http.NewRequest("GET", "http://"+node.ManagementAddr+"/api/queues?page=1&page_size=100&sort=messages&sort_reverse=true", nil)
		req.SetBasicAuth("guest", "guest")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		t.Logf("the API answered the first page of %d queues sorted by depth (%d bytes) in %v", bulk, n, time.Since(start).Round(time.Millisecond))
	}
	dir := artifactsDir(t)
	b := newBrowser(t, dir)
	url := "http://" + node.ManagementAddr + "/"

	b.expectRefusal(http.StatusUnauthorized)
	b.run("wrong password",
		chromedp.Navigate(url),
		chromedp.WaitVisible(chromedp.ID("login-username")),
		chromedp.SendKeys(chromedp.ID("login-username"), "guest"),
		chromedp.SendKeys(chromedp.ID("login-password"), "wrong"),
		chromedp.Click(chromedp.ID("login-submit")),
		until(`(document.querySelector('#login-error:not([hidden])') || {}).textContent === 'Login failed'`),
	)
	b.expectRefusal(0)

	b.run("log in",
		setValue("#login-password", ""),
		chromedp.SendKeys(chromedp.ID("login-password"), "guest"),
		chromedp.Click(chromedp.ID("login-submit")),
		chromedp.WaitVisible(chromedp.ID("nodes-table")),
		until(`document.querySelectorAll('#nodes-table tbody tr').length === 3 && document.querySelectorAll('#nodes-table .tag.leader').length === 1`),
		until(`document.querySelector('#whoami').textContent === 'guest'`),
	)
	b.screenshot("console-overview")
	// Every member's own memory, disk, file descriptors and uptime, asked
	// by the follower that serves the page.
	b.run("every node's resources",
		until(`[...document.querySelectorAll('#nodes-table tbody tr')].length === 3 &&
			[...document.querySelectorAll('#nodes-table tbody tr')].every(tr =>
				/\d (MiB|GiB|KiB) of \d/.test(tr.querySelector('td.mem').textContent) &&
				/\d (MiB|GiB|TiB)/.test(tr.querySelector('td.disk').textContent) &&
				/\d+ of \d+/.test(tr.querySelector('td.fds').textContent) &&
				/\d+ (ms|s|min|h|d)\b/.test(tr.querySelector('td.uptime').textContent))`),
	)

	const queue = "console q/1" // a space and a slash: the page must encode both
	pages := (bulk + 19) / 20
	b.run("page through the queue list",
		chromedp.Click(chromedp.CSS(`#nav a[data-page="queues"]`)),
		chromedp.WaitVisible(chromedp.ID("queues-table")),
		setValue("select.size", "20"),
		until(fmt.Sprintf(`document.querySelector('.pageinfo').textContent === 'page 1 of %d' &&
			document.querySelectorAll('#queues-table tbody tr').length === 20`, pages)),
		chromedp.Click(chromedp.CSS(`button.next`)),
		until(fmt.Sprintf(`document.querySelector('.pageinfo').textContent === 'page 2 of %d' &&
			document.querySelector('#queues-table tbody a').textContent === 'bulk-00020'`, pages)),
		chromedp.Click(chromedp.CSS(`button.first`)),
		until(fmt.Sprintf(`document.querySelector('.pageinfo').textContent === 'page 1 of %d' &&
			document.querySelector('#queues-table tbody a').textContent === 'bulk-00000' && document.querySelector('button.prev').disabled`, pages)),
		chromedp.Click(chromedp.CSS(`button.last`)),
		until(fmt.Sprintf(`document.querySelector('.pageinfo').textContent === 'page %d of %[1]d' &&
			document.querySelector('button.next').disabled && !document.querySelector('button.first').disabled`, pages)),
	)
	b.run("add a queue from the queue list",
		chromedp.Click(chromedp.CSS(`details > summary`)),
		chromedp.SendKeys(chromedp.CSS(`#add-queue input[name="name"]`), queue),
		chromedp.SendKeys(chromedp.CSS(`#add-queue textarea[name="arguments"]`), `{"x-message-ttl": 3600000}`),
		chromedp.Click(chromedp.CSS(`#add-queue button[type="submit"]`)),
		until(`document.querySelector('#banner-text').textContent === 'Queue `+queue+` declared'`),
		// Found with the listing's name filter, on whichever page it is.
		chromedp.SendKeys(chromedp.CSS(`input.filter`), "console q"),
		until(`document.querySelectorAll('#queues-table tbody tr').length === 1 &&
			document.querySelector('#queues-table tbody a').textContent === '`+queue+`'`),
	)
	// The API's refusal, shown as it gave it.
	b.expectRefusal(http.StatusBadRequest)
	b.run("redeclare the queue with another TTL",
		setValue(`#add-queue input[name="name"]`, queue),
		setValue(`#add-queue textarea[name="arguments"]`, `{"x-message-ttl": 5}`),
		chromedp.Click(chromedp.CSS(`#add-queue button[type="submit"]`)),
		until(`/^bad_request: .*inequivalent arg 'x-message-ttl'/.test(document.querySelector('#banner:not(.info) #banner-text').textContent)`),
	)
	b.expectRefusal(0)
	b.screenshot("console-refused")
	b.run("open the queue",
		chromedp.Click(chromedp.CSS(`#queues-table a[href="#/queues/%2F/`+strings.ReplaceAll(strings.ReplaceAll(queue, " ", "%20"), "/", "%2F")+`"]`)),
		chromedp.WaitVisible(chromedp.ID("queue-ready")),
		until(`document.querySelector('#queue-ready').textContent === '0'`),
		until(`document.querySelector('#queue-details').textContent.includes('1 h')`),
	)
	const payload = "hello from the console ✓"
	b.run("publish a message",
		chromedp.SendKeys(chromedp.ID("publish-payload"), payload),
		chromedp.Click(chromedp.ID("publish-submit")),
		until(`document.querySelector('#banner-text').textContent === 'Message published'`),
		until(`document.querySelector('#queue-ready').textContent === '1'`),
		// It dies in an hour (the queue's x-message-ttl): raftmq's next_death.
		until(`/^in \d+ min/.test([...document.querySelectorAll('#queue-details dt')].find(d => d.textContent === 'Next death').nextElementSibling.textContent)`),
	)
	b.run("get it back",
		setValue(`#get select[name="ackmode"]`, "ack_requeue_false"),
		chromedp.Click(chromedp.ID("get-submit")),
		until(`(document.querySelector('#got .payload') || {}).textContent === '`+payload+`'`),
		until(`document.querySelector('#queue-ready').textContent === '0'`),
	)
	b.screenshot("console-queue")
	// The queue's charts: the publish and the get above, between two of
	// the API's samples (every 5 s; the page refreshes every 5 s).
	b.run("the queue's rate charts",
		until(`Number(document.querySelector('#queue-rates polyline[data-series="publish"]').dataset.max) > 0 &&
			Number(document.querySelector('#queue-rates polyline[data-series="deliver_get"]').dataset.max) > 0 &&
			document.querySelector('#queue-depths polyline[data-series="messages_ready"]') !== null`),
	)
	b.screenshot("console-queue-charts")

	b.run("the queue list sorted by depth",
		chromedp.Click(chromedp.CSS(`#nav a[data-page="queues"]`)),
		chromedp.WaitVisible(chromedp.ID("queues-table")),
		setValue("input.filter", ""),
		until(fmt.Sprintf(`(t => / in all$/.test(t) && Number(t.replace(/\D/g, '')) === %d)(document.querySelector('.count').textContent)`, bulk+1)),
		chromedp.Click(chromedp.CSS(`th[data-sort="messages"]`)),
		until(`document.querySelector('th[data-sort="messages"]').classList.contains('sorted-desc') &&
			document.querySelector('#queues-table tbody tr td:nth-child(7)').textContent === '6'`),
	)
	b.screenshot("console-queues-" + strconv.Itoa(bulk+1))

	// Messages that die of their TTL into a dead-letter queue, for the
	// overview's dead-letter rate.
	{
		conn, err := amqp.Dial(node.AMQPURL())
		if err != nil {
			t.Fatal(err)
		}
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ch.QueueDeclare("console-dead", true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := ch.QueueDeclare("console-ttl", true, false, false, false, amqp.Table{"x-message-ttl": int32(1),
			"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "console-dead"}); err != nil {
			t.Fatal(err)
		}
		for range 20 {
			if err := ch.Publish("", "console-ttl", false, false, amqp.Publishing{Body: []byte("dies")}); err != nil {
				t.Fatal(err)
			}
		}
		conn.Close()
	}
	b.run("the overview's rate charts",
		chromedp.Click(chromedp.CSS(`#nav a[data-page="overview"]`)),
		chromedp.WaitVisible(chromedp.ID("overview-rates")),
		until(`['publish', 'deliver_get', 'ack', 'dead_lettered'].every(k =>
			Number(document.querySelector('#overview-rates polyline[data-series="' + k + '"]').dataset.max) > 0) &&
			Number(document.querySelector('#overview-depths polyline[data-series="messages_ready"]').dataset.max) > 0`),
		// The window can be narrowed to the last minute.
		setValue("select.chart-age", "60"),
		until(`/−1 min/.test(document.querySelector('#overview-rates svg').textContent) &&
			Number(document.querySelector('#overview-rates polyline[data-series="publish"]').dataset.n) <= 13`),
		setValue("select.chart-age", "600"),
		until(`/−10 min/.test(document.querySelector('#overview-rates svg').textContent)`),
	)
	b.screenshot("console-charts")

	b.run("exchanges, with the default exchange's page",
		chromedp.Click(chromedp.CSS(`#nav a[data-page="exchanges"]`)),
		chromedp.WaitVisible(chromedp.ID("exchanges-table")),
		until(`[...document.querySelectorAll('#exchanges-table a')].some(a => a.textContent === 'amq.topic')`),
		chromedp.Click(chromedp.CSS(`#exchanges-table a[href="#/exchanges/%2F/"]`)),
		until(`document.querySelector('#exchange-details dl') !== null && document.querySelector('h1').textContent.includes('(AMQP default)')`),
	)
	b.screenshot("console-exchange")
	consoleDelayed(t, b, node)
	b.run("policies, users and permissions",
		chromedp.Click(chromedp.CSS(`#nav a[data-page="policies"]`)),
		until(`/No policies/.test(document.querySelector('#policies').textContent)`),
		chromedp.Click(chromedp.CSS(`#nav a[data-page="users"]`)),
		until(`/guest/.test(document.querySelector('#users').textContent) && /\.\*/.test(document.querySelector('#permissions').textContent)`),
	)
	b.screenshot("console-users")

	// A client's connection, closed from the console: the first click arms
	// the button, the second closes it on its node.
	conn, err := amqp.Dial(c.Nodes[0].AMQPURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	// A consumer's channel, for the channel list.
	cch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := cch.Qos(7, 0, false); err != nil {
		t.Fatal(err)
	}
	if _, err := cch.Consume("bulk-00001", "console-consumer", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	b.run("the channel list",
		chromedp.Click(chromedp.CSS(`#nav a[data-page="channels"]`)),
		chromedp.WaitVisible(chromedp.ID("channels-table")),
		until(`document.querySelectorAll('#channels-table tbody tr').length === 1 &&
			document.querySelector('#channels-table tbody tr td:nth-child(7)').textContent === '7' &&
			document.querySelector('#channels-table tbody tr td:nth-child(6)').textContent === '1'`),
	)
	b.screenshot("console-channels")

	b.run("add a virtual host on the admin page",
		chromedp.Click(chromedp.CSS(`#nav a[data-page="admin"]`)),
		chromedp.WaitVisible(chromedp.ID("vhosts-table")),
		until(`document.querySelector('#vhosts-table tr[data-vhost="/"]') !== null && document.querySelector('#no-vhost-limits') !== null`),
		chromedp.Click(chromedp.CSS(`.panel details > summary`)),
		chromedp.SendKeys(chromedp.CSS(`#add-vhost input[name="name"]`), "console vh"),
		chromedp.SendKeys(chromedp.CSS(`#add-vhost input[name="description"]`), "made in the console"),
		chromedp.Click(chromedp.CSS(`#add-vhost button[type="submit"]`)),
		until(`document.querySelector('#banner-text').textContent === 'Virtual host console vh added'`),
		until(`(r => r !== null && /made in the console/.test(r.textContent) && /running on 3/.test(r.textContent))(document.querySelector('#vhosts-table tr[data-vhost="console vh"]'))`),
	)
	b.screenshot("console-admin")
	b.run("delete it",
		chromedp.Click(chromedp.CSS(`button.del-vhost[data-name="console vh"]`)),
		until(`document.querySelector('button.del-vhost[data-name="console vh"]').classList.contains('armed')`),
		chromedp.Click(chromedp.CSS(`button.del-vhost[data-name="console vh"]`)),
		until(`document.querySelector('#banner-text').textContent === 'Virtual host console vh deleted' &&
			document.querySelector('#vhosts-table tr[data-vhost="console vh"]') === null`),
	)

	// A virtual host limit set in the form holds: max-connections 0
	// refuses a new connection to "/" (the one open stays); cleared with
	// its button, connections are taken again.
	b.run("set a virtual host limit",
		setValue(`#set-vhost-limit select[name="limit"]`, "max-connections"),
		chromedp.SendKeys(chromedp.CSS(`#set-vhost-limit input[name="value"]`), "0"),
		chromedp.Click(chromedp.CSS(`#set-vhost-limit button[type="submit"]`)),
		until(`document.querySelector('#banner-text').textContent === 'Limit max-connections of / set to 0'`),
		until(`(r => r !== null && r.querySelector('td.num').textContent === '0')(document.querySelector('#vhost-limits-table tr[data-limit="/ max-connections"]'))`),
	)
	b.screenshot("console-limits")
	// Another node applies the limit once the entry reaches it.
	if err := Eventually(30*time.Second, func() error {
		c2, err := amqp.Dial(c.Nodes[1].AMQPURL())
		if err == nil {
			c2.Close()
			return errors.New("a connection past the max-connections set in the console was taken")
		}
		if e, ok := err.(*amqp.Error); !ok || e.Code != amqp.NotAllowed || e.Reason != "NOT_ALLOWED - access to vhost '/' refused for user 'guest': connection limit (0) is reached" {
			return fmt.Errorf("connection past the limit: %v", err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	b.run("clear it",
		chromedp.Click(chromedp.CSS(`button.clear-limit[data-name="max-connections"]`)),
		until(`document.querySelector('button.clear-limit').classList.contains('armed')`),
		chromedp.Click(chromedp.CSS(`button.clear-limit[data-name="max-connections"]`)),
		until(`document.querySelector('#banner-text').textContent === 'Limit max-connections of / cleared' && document.querySelector('#no-vhost-limits') !== null`),
	)
	if err := Eventually(30*time.Second, func() error {
		c2, err := amqp.Dial(c.Nodes[1].AMQPURL())
		if err != nil {
			return err
		}
		return c2.Close()
	}); err != nil {
		t.Fatalf("a connection after the limit was cleared: %v", err)
	}

	b.run("the connection list",
		chromedp.Click(chromedp.CSS(`#nav a[data-page="connections"]`)),
		until(`document.querySelectorAll('#connections-table button.close-conn').length === 1`),
	)
	b.screenshot("console-connections")
	b.run("close a connection",
		chromedp.Click(chromedp.CSS(`button.close-conn`)),
		until(`document.querySelector('button.close-conn').classList.contains('armed')`),
		// The page's timed refresh leaves an armed button as it is.
		func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
			_, err := chromedp.Evaluate[bool](`(refresh().then(() => { window.refreshedWhileArmed = true; }), true)`)(ctx, t)
			return chromedp.Void{}, err
		},
		until(`window.refreshedWhileArmed === true && document.querySelector('button.close-conn').classList.contains('armed')`),
		chromedp.Click(chromedp.CSS(`button.close-conn`)),
		until(`document.querySelector('#banner-text').textContent === 'Connection closed'`),
	)
	select {
	case e := <-closed:
		if e == nil || e.Code != amqp.ConnectionForced || !strings.Contains(e.Reason, "raftmq console") {
			t.Fatalf("the connection closed with %v", e)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the connection closed from the console is still open")
	}

	b.run("log out",
		chromedp.Click(chromedp.ID("logout")),
		chromedp.WaitVisible(chromedp.ID("login-username")),
	)

	// A user tagged management only: no nodes, no users, no policies, and
	// the API refusing the policies page leaves the user logged in.
	apiPut(t, node, "/api/users/viewer", `{"password": "pw-viewer", "tags": "management"}`)
	apiPut(t, node, "/api/permissions/%2F/viewer", `{"configure": ".*", "write": ".*", "read": ".*"}`)
	b.run("log in as a management user",
		setValue("#login-username", "viewer"),
		setValue("#login-password", "pw-viewer"),
		chromedp.Click(chromedp.ID("login-submit")),
		// The page logged in to is the one logged out of (connections).
		until(`document.querySelector('#whoami').textContent === 'viewer' && document.querySelector('#connections-table') !== null`),
		chromedp.Click(chromedp.CSS(`#nav a[data-page="overview"]`)),
		until(`/shown to users tagged monitoring/.test(document.querySelector('#nodes').textContent)`),
		until(`document.querySelector('#whoami').textContent === 'viewer' && document.querySelector('#nav-users').hidden && document.querySelector('#nav-policies').hidden &&
			document.querySelector('#nav-admin').hidden`),
		chromedp.Click(chromedp.CSS(`#nav a[data-page="queues"]`)),
		until(`[...document.querySelectorAll('#queues-table a')].some(a => a.textContent === 'bulk-00000')`),
	)
	b.expectRefusal(http.StatusUnauthorized)
	b.run("a page the user may not see",
		chromedp.Navigate(url+"#/policies"),
		until(`/Not policymaker user/.test(document.querySelector('#banner:not(.info) #banner-text').textContent)`),
		until(`!document.querySelector('#top').hidden && document.querySelector('#whoami').textContent === 'viewer'`),
	)
	b.expectRefusal(0)
	b.run("log out again",
		chromedp.Click(chromedp.ID("logout")),
		chromedp.WaitVisible(chromedp.ID("login-username")),
	)
	b.check("the whole session")
}

// consoleDelayed: a delayed exchange's waiting messages show in the
// exchange list and on its page, earliest due first, and one is cancelled
// there (the first click arms the button), then the rest are purged.
func consoleDelayed(t *testing.T, b *browser, node *Node) {
	t.Helper()
	conn, err := amqp.Dial(node.AMQPURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	const x = "console delayed"
	if err := ch.ExchangeDeclare(x, "x-delayed-message", true, false, false, false, amqp.Table{"x-delayed-type": "direct"}); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("console-delayed-q", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind("console-delayed-q", "k", x, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	// Due in 3, 1 and 2 hours: listed 1, 2, 3 h.
	for _, h := range []int{3, 1, 2} {
		dc, err := ch.PublishWithDeferredConfirm(x, "k", false, false, amqp.Publishing{Body: []byte(strings.Repeat("x", h)),
			Headers: amqp.Table{"x-delay": int32(h * 3600_000), "hours": int32(h)}})
		if err != nil {
			t.Fatal(err)
		}
		if !dc.Wait() {
			t.Fatal("a delayed publish was nacked")
		}
	}
	rows := `document.querySelectorAll('#delayed-table tbody tr[data-seq]')`
	b.run("the delayed exchange in the exchange list",
		chromedp.Click(chromedp.CSS(`#nav a[data-page="exchanges"]`)),
		chromedp.WaitVisible(chromedp.ID("exchanges-table")),
		until(`[...document.querySelectorAll('#exchanges-table tbody tr')].some(r => r.querySelector('a').textContent === '`+x+`' &&
			/^3 next in (59 min|1 h)/.test(r.querySelector('td:nth-child(5)').textContent))`),
		chromedp.Click(chromedp.CSS(`#exchanges-table a[href="#/exchanges/%2F/console%20delayed"]`)),
		chromedp.WaitVisible(chromedp.ID("delayed-panel")),
		until(rows+`.length === 3 && /^3 waiting; the next is due in (59 min|1 h)/.test(document.querySelector('#delayed-summary').textContent)`),
		// Earliest first, with its headers and size.
		until(`[...`+rows+`].map(r => r.querySelector('td:nth-child(5)').textContent).join() === '1 B,2 B,3 B' &&
			`+rows+`[0].querySelector('td:nth-child(4)').textContent.includes('hours: 1') && `+rows+`[0].querySelector('td:nth-child(3)').textContent === 'k'`),
	)
	b.screenshot("console-delayed")
	seq, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](rows+`[0].dataset.seq`))
	if err != nil {
		t.Fatal(err)
	}
	b.run("cancel the earliest",
		chromedp.Click(chromedp.CSS(`#delayed-table tr[data-seq="`+seq+`"] button.delayed-cancel`)),
		until(`document.querySelector('#delayed-table tr[data-seq="`+seq+`"] button.delayed-cancel').classList.contains('armed')`),
		chromedp.Click(chromedp.CSS(`#delayed-table tr[data-seq="`+seq+`"] button.delayed-cancel`)),
		until(`document.querySelector('#banner-text').textContent === 'Delayed message `+seq+` cancelled'`),
		until(rows+`.length === 2 && !document.querySelector('#delayed-table tr[data-seq="`+seq+`"]') &&
			/^2 waiting; the next is due in (1 h 59 min|2 h)/.test(document.querySelector('#delayed-summary').textContent)`),
	)
	if got := delayedCount(t, node, x); got != 2 {
		t.Fatalf("after the cancel, the API says %v wait", got)
	}
	b.run("purge the rest",
		chromedp.Click(chromedp.ID("delayed-purge")),
		until(`document.querySelector('#delayed-purge').classList.contains('armed')`),
		chromedp.Click(chromedp.ID("delayed-purge")),
		until(`document.querySelector('#banner-text').textContent === 'Purged 2 delayed messages'`),
		until(rows+`.length === 0 && document.querySelector('#delayed-summary').textContent === 'No message waits.' && document.querySelector('#delayed-purge').disabled`),
	)
	if got := delayedCount(t, node, x); got != 0 {
		t.Fatalf("after the purge, the API says %v wait", got)
	}
}

// delayedCount is messages_delayed of exchange x in / as n's management API
// answers it.
func delayedCount(t *testing.T, n *Node, x string) float64 {
	t.Helper()
	req, err := http.NewRequest("GET", "http://"+n.ManagementAddr+"/api/exchanges/%2F/"+strings.ReplaceAll(x, " ", "%20"), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth("guest", "guest")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		MessagesDelayed float64 `json:"messages_delayed"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out.MessagesDelayed
}

// apiPut sends body to the management API of n as guest.
func apiPut(t *testing.T, n *Node, path, body string) {
	t.Helper()
	if code, b := apiSend(t, n, "PUT", path, body); code/100 != 2 {
		t.Fatalf("PUT %s: %d %s", path, code, b)
	}
}

// declareQueues declares n queues bulk-00000.. with a few messages in
// some, over several channels at once.
func declareQueues(t *testing.T, n *Node, count int) {
	t.Helper()
	conn, err := amqp.Dial(n.AMQPURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	const workers = 8
	errs := make(chan error, workers)
	for w := range workers {
		go func() {
			ch, err := conn.Channel()
			if err != nil {
				errs <- err
				return
			}
			defer ch.Close()
			for i := w; i < count; i += workers {
				name := fmt.Sprintf("bulk-%05d", i)
				if _, err := ch.QueueDeclare(name, true, false, false, false, nil); err != nil {
					errs <- err
					return
				}
				for range i % 7 {
					if err := ch.Publish("", name, false, false, amqp.Publishing{Body: []byte("x")}); err != nil {
						errs <- err
						return
					}
				}
			}
			errs <- nil
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			t.Fatalf("declaring %d queues: %v", count, err)
		}
	}
	t.Logf("declared %d queues in %v", count, time.Since(start).Round(time.Millisecond))
}
