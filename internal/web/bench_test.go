package web

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"runtime"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/web/webtest"
)

// benchPages are the pages measured (with the fake engine's two clusters,
// one machine and a pending plan).
var benchPages = []string{"", "tenants/lab", "tenants/lab/plan", "machines", "new", "tenants/lab/edit"}

func pageName(p string) string {
	if p == "" {
		return "overview"
	}
	return p
}

// BenchmarkPageWeight reports each page's bytes with everything it loads
// (its HTML, the stylesheet, the script, the icon; nothing else exists).
func BenchmarkPageWeight(b *testing.B) {
	h := newHarness(b)
	if err := h.eng.Plan(b.Context(), "lab"); err != nil {
		b.Fatal(err)
	}
	c := h.client()
	assets := 0
	for name := range h.srv.static {
		_, body := h.get(c, "static/"+name)
		assets += len(body)
	}
	for _, p := range benchPages {
		b.Run(pageName(p), func(b *testing.B) {
			var n int
			for b.Loop() {
				_, body := h.get(c, p)
				n = len(body)
			}
			b.ReportMetric(float64(n), "html-B")
			b.ReportMetric(float64(n+assets), "total-B")
		})
	}
}

// BenchmarkTTFB is the time from a request to the first byte of its
// answer, through the ingress, per page.
func BenchmarkTTFB(b *testing.B) {
	h := newHarness(b)
	if err := h.eng.Plan(b.Context(), "lab"); err != nil {
		b.Fatal(err)
	}
	c := h.client()
	for _, p := range benchPages {
		b.Run(pageName(p), func(b *testing.B) {
			var total time.Duration
			for b.Loop() {
				var start, first time.Time
				tr := &httptrace.ClientTrace{GotFirstResponseByte: func() { first = time.Now() }}
				req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(b.Context(), tr), http.MethodGet, h.in.Entry()+p, nil)
				start = time.Now()
				resp, err := c.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				total += first.Sub(start)
			}
			b.ReportMetric(float64(total.Microseconds())/float64(b.N)/1000, "ttfb-ms")
		})
	}
}

// BenchmarkPageUsable loads each page in Chromium through the ingress (from
// a blank tab, as when the sidebar entry is opened, so that no earlier
// page's unloading is counted) and reports the navigation's time to first
// byte and to the page being usable (its script has run: forms answer in
// place, the page follows the engine).
func BenchmarkPageUsable(b *testing.B) {
	h := newHarness(b)
	if err := h.eng.Plan(b.Context(), "lab"); err != nil {
		b.Fatal(err)
	}
	br := webtest.NewBrowser(b)
	p := webtest.NewPanel(b, br, h.in)
	for _, pg := range benchPages {
		b.Run(pageName(pg), func(b *testing.B) {
			var ttfb, ready float64
			best := -1.0
			for b.Loop() {
				br.Visit("about:blank")
				p.Open(pg)
				v := webtest.Eval[[]float64](br, `(function(){var n=performance.getEntriesByType("navigation")[0];
 var r=performance.getEntriesByName("panel-ready")[0]; return [n.responseStart - n.requestStart, r ? r.startTime : -1]})()`)
				ttfb += v[0]
				ready += v[1]
				if best < 0 || v[1] < best {
					best = v[1]
				}
			}
			b.ReportMetric(ttfb/float64(b.N), "ttfb-ms")
			b.ReportMetric(ready/float64(b.N), "usable-ms")
			// the machine is shared: the fastest load is the page's own cost
			b.ReportMetric(best, "usable-min-ms")
		})
	}
}

// BenchmarkLogLatency is the time from a log line leaving the engine to
// its line in the browser's log (one clock: the same machine).
func BenchmarkLogLatency(b *testing.B) {
	h := newHarness(b)
	br := webtest.NewBrowser(b)
	p := webtest.NewPanel(b, br, h.in)
	p.Open("tenants/lab")
	br.WaitJS(10*time.Second, "the stream", `document.getElementById("conn").classList.contains("on")`)
	webtest.Eval[bool](br, `(function(){window.__seen = {};
 new MutationObserver(function(ms){ ms.forEach(function(m){ m.addedNodes.forEach(function(n){
   var t = n.querySelector && n.querySelector(".txt"); if (t) window.__seen[t.textContent] = performance.timeOrigin + performance.now(); }); }); })
 .observe(document.getElementById("log"), {childList: true}); return true})()`)
	var total float64
	i := 0
	for b.Loop() {
		i++
		text := fmt.Sprintf("bench line %d", i)
		t0 := time.Now()
		h.eng.emit(LogLine{Tenant: "lab", Operation: "apply", At: t0, Source: "tofu", Level: "info", Text: text})
		br.WaitJS(10*time.Second, text, fmt.Sprintf(`window.__seen[%q] > 0`, text))
		seen := webtest.Eval[float64](br, fmt.Sprintf(`window.__seen[%q]`, text))
		total += seen - float64(t0.UnixNano())/1e6
	}
	b.ReportMetric(total/float64(b.N), "latency-ms")
}

// BenchmarkIdleMemory is the heap the panel adds to the process: its
// server (templates, static files) made and idle, after it has served
// each page once.
func BenchmarkIdleMemory(b *testing.B) {
	h := newHarness(b)
	var kib float64
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		srv, err := New(Options{Source: h.eng, Command: h.bridge.HandleRequest, Files: h.store, Admins: Operator{},
			Trusted: h.srv.trusted})
		if err != nil {
			b.Fatal(err)
		}
		for _, p := range benchPages {
			req := httptest.NewRequest(http.MethodGet, "/"+p, nil)
			req.RemoteAddr = ingressFrom.String() + ":40000"
			srv.ServeHTTP(httptest.NewRecorder(), req)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(srv)
		kib = float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / 1024
	}
	b.ReportMetric(kib, "heap-KiB")
}
