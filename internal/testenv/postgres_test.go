package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestPostgresLoginTerminateRestart(t *testing.T) {
	p := StartPostgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg, err := pgx.ParseConfig(p.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["application_name"] = "victim"
	if _, err := pgx.ConnectConfig(ctx, cfg); err == nil {
		t.Fatal("login without the password worked")
	}
	cfg.Password = p.Password
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("login: %v", err)
	}
	if n := p.Terminate("victim"); n != 1 {
		t.Fatalf("terminated %d sessions, want 1", n)
	}
	if err := conn.Ping(ctx); err == nil {
		t.Fatal("a terminated session still answers")
	}
	p.Exec("CREATE TABLE kept (x int)")
	p.Restart()
	if n := p.QueryInt64("SELECT count(*) FROM kept"); n != 0 {
		t.Fatalf("count = %d", n)
	}
	conn, err = pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("login after restart: %v", err)
	}
	_ = conn.Close(ctx)
}
