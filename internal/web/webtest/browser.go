package webtest

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/rezuscloud/rezuscloud/internal/testenv"
)

// Browser is a headless Chromium (Debian's) driven with chromedp, with a
// fresh profile, and the flags that keep it off the network: it asks
// nothing of the internet by itself (background networking, component
// updates, sync and first-run pages off). It records every request the
// pages make, and every Content-Security-Policy violation.
type Browser struct {
	t   testing.TB
	ctx context.Context

	mu       sync.Mutex
	requests []string
	// Artefacts is where Screenshot writes: $REZUSCLOUD_ARTIFACTS, or a
	// new temporary directory that is kept (its path is logged).
	Artefacts string
}

// Desktop and Phone are the viewports of the screenshots.
var (
	Desktop = Viewport{Name: "desktop", Width: 1280, Height: 900}
	Phone   = Viewport{Name: "phone", Width: 390, Height: 844, Mobile: true}
)

// Viewport is a window size.
type Viewport struct {
	Name          string
	Width, Height int64
	Mobile        bool
}

// cspProbe records CSP violations before any page script runs.
const cspProbe = `window.__csp = []; document.addEventListener("securitypolicyviolation",
 function (e) { window.__csp.push(e.violatedDirective + " " + e.blockedURI); });`

// NewBrowser starts Chromium for the test (skipped without it, unless $CI).
func NewBrowser(t testing.TB) *Browser {
	t.Helper()
	bin := testenv.Chromium(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-domain-reliability", true),
		chromedp.Flag("dns-prefetch-disable", true),
	)
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); acancel() })
	b := &Browser{t: t, ctx: ctx}
	b.Artefacts = os.Getenv("REZUSCLOUD_ARTIFACTS")
	if b.Artefacts == "" {
		dir, err := os.MkdirTemp("", "rezuscloud-panel-")
		if err != nil {
			t.Fatal(err)
		}
		b.Artefacts = dir
	}
	if err := os.MkdirAll(b.Artefacts, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(ctx, network.Enable, network.EnableParams{}); err != nil {
		t.Fatalf("chromium: %v", err)
	}
	if _, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument,
		page.AddScriptToEvaluateOnNewDocumentParams{Source: cspProbe}); err != nil {
		t.Fatalf("chromium: %v", err)
	}
	_ = chromedp.Listen(ctx, func(ev any) {
		if e, ok := ev.(*network.EventRequestWillBeSent); ok && e.Request != nil {
			b.mu.Lock()
			b.requests = append(b.requests, e.Request.URL)
			b.mu.Unlock()
		}
	})
	return b
}

// Context is the browser tab's chromedp context.
func (b *Browser) Context() context.Context { return b.ctx }

// Do runs actions, failing the test on an error; each step gets timeout.
func (b *Browser) Do(timeout time.Duration, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, timeout)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.t.Fatalf("browser: %v (at %s)", err, b.location())
	}
}

// Eval evaluates a JavaScript expression for its value.
func Eval[T any](b *Browser, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		b.t.Fatalf("browser: %s: %v", expr, err)
	}
	return v
}

// WaitJS waits until a JavaScript expression is true. It asks again every
// few milliseconds, also across a navigation (a form that posts and
// redirects).
func (b *Browser) WaitJS(timeout time.Duration, what, expr string) {
	b.t.Helper()
	deadline := time.Now().Add(timeout)
	var last error
	for {
		ctx, cancel := context.WithTimeout(b.ctx, 2*time.Second)
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](expr))
		cancel()
		if err == nil && ok {
			return
		}
		if err != nil {
			last = err
		}
		if time.Now().After(deadline) {
			text, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.readyState + " " + (document.documentElement ? document.documentElement.outerHTML.length : -1) + "\n" + (document.body ? document.body.innerText.slice(0, 3000) : "")`))
			b.t.Fatalf("browser: timed out after %v waiting for %s (last error %v)\n(at %s; the page says:)\n%s", timeout, what, last, b.location(), text)
		}
		time.Sleep(10 * time.Millisecond) // polling the page, not waiting for time
	}
}

func (b *Browser) location() string {
	ctx, cancel := context.WithTimeout(b.ctx, 2*time.Second)
	defer cancel()
	l, _ := chromedp.Run(ctx, chromedp.Location())
	return l
}

// Open navigates to u and waits for the page's script to be ready.
func (b *Browser) Open(u string) {
	b.t.Helper()
	b.Do(20*time.Second, chromedp.Navigate(u))
	b.WaitJS(20*time.Second, "the page to be ready", `document.documentElement.dataset.ready === "1"`)
}

// View sets the viewport.
func (b *Browser) View(v Viewport) {
	b.t.Helper()
	var opts []chromedp.EmulateViewportOption
	if v.Mobile {
		opts = append(opts, chromedp.EmulateMobile)
	}
	b.Do(10*time.Second, chromedp.EmulateViewport(v.Width, v.Height, opts...))
}

// Scheme emulates the system's colour scheme ("light" or "dark").
func (b *Browser) Scheme(s string) {
	b.t.Helper()
	if _, err := chromedp.Call(b.ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
		Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: s}}}); err != nil {
		b.t.Fatalf("browser: colour scheme: %v", err)
	}
}

// Screenshot saves the whole page as <Artefacts>/<name>.png.
func (b *Browser) Screenshot(name string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("browser: screenshot %s: %v", name, err)
	}
	p := filepath.Join(b.Artefacts, name+".png")
	if err := os.WriteFile(p, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot %s", p)
	return p
}

// Requests are the URLs of every request the pages made.
func (b *Browser) Requests() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.requests...)
}

// ExternalRequests are the requests to anywhere but origin (data: URLs
// are the page's own).
func (b *Browser) ExternalRequests(origin string) []string {
	var out []string
	for _, r := range b.Requests() {
		u, err := url.Parse(r)
		if err != nil || (u.Scheme != "data" && u.Scheme+"://"+u.Host != origin) {
			out = append(out, r)
		}
	}
	return out
}

// CSPViolations are the current page's Content-Security-Policy violations.
func (b *Browser) CSPViolations() []string {
	return Eval[[]string](b, `window.__csp || []`)
}

// Click clicks (with the mouse) the first element matching a CSS
// selector, once it is there. A live page may swap the element between
// finding and clicking it: then the new one is clicked.
func (b *Browser) Click(sel string) {
	b.t.Helper()
	for try := 0; ; try++ {
		b.WaitJS(15*time.Second, sel, fmt.Sprintf(`!!document.querySelector(%q)`, sel))
		ctx, cancel := context.WithTimeout(b.ctx, 15*time.Second)
		err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(sel)))
		cancel()
		if err == nil {
			return
		}
		if try == 3 || !strings.Contains(err.Error(), "node") {
			b.t.Fatalf("browser: clicking %s: %v (at %s)", sel, err, b.location())
		}
	}
}

// Submit clicks a button that submits a form and waits for the page the
// form's answer loads (a redirect is followed to its page).
func (b *Browser) Submit(sel string) {
	b.t.Helper()
	b.WaitJS(15*time.Second, sel, fmt.Sprintf(`!!document.querySelector(%q)`, sel))
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if _, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.CSS(sel))); err != nil {
		b.t.Fatalf("browser: submitting with %s: %v", sel, err)
	}
	b.WaitJS(20*time.Second, "the page to be ready", `document.documentElement.dataset.ready === "1"`)
}

// Fill sets an input's value (as typing would: input events fire).
func (b *Browser) Fill(sel, value string) {
	b.t.Helper()
	b.WaitJS(15*time.Second, sel, fmt.Sprintf(`!!document.querySelector(%q)`, sel))
	Eval[bool](b, fmt.Sprintf(`(function(){var e=document.querySelector(%q); e.focus(); e.value=%q;
 e.dispatchEvent(new Event("input",{bubbles:true})); e.dispatchEvent(new Event("change",{bubbles:true})); return true})()`, sel, value))
}

// Text is the visible text of the first element matching sel ("" when none).
func (b *Browser) Text(sel string) string {
	return Eval[string](b, fmt.Sprintf(`(function(){var e=document.querySelector(%q); return e ? e.innerText : ""})()`, sel))
}

// WaitText waits until the element matching sel contains text.
func (b *Browser) WaitText(timeout time.Duration, sel, text string) {
	b.t.Helper()
	b.WaitJS(timeout, fmt.Sprintf("%q in %s", text, sel),
		fmt.Sprintf(`(function(){var e=document.querySelector(%q); return !!e && e.innerText.indexOf(%q) >= 0})()`, sel, text))
}

// HasText reports whether the page's text contains s.
func (b *Browser) HasText(s string) bool {
	return Eval[bool](b, fmt.Sprintf(`document.body.innerText.indexOf(%q) >= 0`, s))
}

// Trim is the text without surrounding space.
func Trim(s string) string { return strings.TrimSpace(s) }

func navigate(u string) chromedp.Action[chromedp.Void] { return chromedp.Navigate(u) }

// Tab moves the keyboard focus with Tab until it is on the element
// matching sel (at most 100 presses), as a keyboard user would.
func (b *Browser) Tab(sel string) {
	b.t.Helper()
	for i := 0; i < 100; i++ {
		if Eval[bool](b, fmt.Sprintf(`!!document.activeElement && document.activeElement.matches(%q)`, sel)) {
			return
		}
		b.Do(5*time.Second, chromedp.KeyEvent("\t"))
	}
	b.t.Fatalf("browser: Tab never reaches %s", sel)
}

// Key sends keys to the focused element ("\r" is Enter, " " Space).
func (b *Browser) Key(keys string) {
	b.t.Helper()
	b.Do(5*time.Second, chromedp.KeyEvent(keys))
}

// Focused describes the focused element and whether its focus ring shows
// (:focus-visible).
func (b *Browser) Focused() (desc string, visible bool) {
	v := Eval[[]any](b, `(function(){var e=document.activeElement; return [e ? (e.tagName + " " + (e.innerText||e.name||"")).trim() : "", !!e && e.matches(":focus-visible")]})()`)
	d, _ := v[0].(string)
	ok, _ := v[1].(bool)
	return d, ok
}

// Visit navigates to u (any page, not only the panel's) and returns its text.
func (b *Browser) Visit(u string) string {
	b.t.Helper()
	b.Do(20*time.Second, chromedp.Navigate(u))
	return Eval[string](b, `document.body ? document.body.innerText : ""`)
}
