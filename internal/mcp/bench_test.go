package mcp_test

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"

	"github.com/rezuscloud/rezuscloud/internal/mcp"
	"github.com/rezuscloud/rezuscloud/internal/mcp/mcptest"
)

// twenty is 20 running metal clusters of 3 nodes each.
func twenty() []mcp.View {
	vs := make([]mcp.View, 20)
	for i := range vs {
		vs[i] = metalView(fmt.Sprintf("c%02d", i))
	}
	return vs
}

// BenchmarkClusterStatus is one cluster_status round trip (goal ≤ 20 ms)
// with 20 clusters: a real MCP client over HTTP on loopback, one session.
func BenchmarkClusterStatus(b *testing.B) {
	h := start(b, false, twenty()...)
	s, err := mcptest.Dial(context.Background(), h.base, testToken, mcptest.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		res, err := s.CallTool(ctx, &sdk.CallToolParams{Name: mcp.ToolClusterStatus,
			Arguments: map[string]any{"cluster": fmt.Sprintf("c%02d", i%20)}})
		if err != nil || res.IsError {
			b.Fatalf("%v %v", err, res)
		}
	}
}

// BenchmarkClusterStatusNewSession is the same call the way Home
// Assistant's MCP client makes it: a new session (initialize, call, close)
// for every tool call.
func BenchmarkClusterStatusNewSession(b *testing.B) {
	h := start(b, false, twenty()...)
	ctx := context.Background()
	for b.Loop() {
		s, err := mcptest.Dial(ctx, h.base, testToken, mcptest.Options{InPath: true})
		if err != nil {
			b.Fatal(err)
		}
		res, err := s.CallTool(ctx, &sdk.CallToolParams{Name: mcp.ToolClusterStatus, Arguments: map[string]any{"cluster": "c07"}})
		if err != nil || res.IsError {
			b.Fatalf("%v %v", err, res)
		}
		s.Close()
	}
}

// BenchmarkIdleMemory reports the heap the server adds while idle: built
// with every tool and listening, with no session (idle-heap-bytes), and
// with one idle session open (session-heap-bytes).
func BenchmarkIdleMemory(b *testing.B) {
	for b.Loop() {
		before := heap()
		srv, err := mcp.New(mcp.Options{Source: newFakeSource(twenty()...), Command: (&recorder{}).Command,
			Token: testToken, Writes: true, Log: zap.NewNop()})
		if err != nil {
			b.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- srv.Serve(ctx, ln) }()
		idle := heap()
		s, err := mcptest.Dial(context.Background(), "http://"+ln.Addr().String(), testToken, mcptest.Options{})
		if err != nil {
			b.Fatal(err)
		}
		session := heap()
		b.ReportMetric(float64(idle-before), "idle-heap-bytes")
		b.ReportMetric(float64(session-idle), "session-heap-bytes")
		s.Close()
		cancel()
		<-done
		runtime.KeepAlive(srv)
	}
}

func heap() int64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// BenchmarkClusterStatusCall is the tool alone, without HTTP and JSON-RPC
// (the Assist scripts' path), on 20 clusters.
func BenchmarkClusterStatusCall(b *testing.B) {
	srv, err := mcp.New(mcp.Options{Source: newFakeSource(twenty()...), Command: (&recorder{}).Command, Log: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for b.Loop() {
		if _, err := srv.Call(ctx, mcp.Caller{}, mcp.ToolClusterStatus, []byte(`{"cluster":"c07"}`)); err != nil {
			b.Fatal(err)
		}
	}
}
