package wsapi

import (
	"strings"
	"testing"

	"github.com/rezuscloud/rezuscloud/internal/hass/wsapi/fakeha"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// TestRefusedNotification checks that a refused command fires the
// operation event with result refused and raises a notification of its own
// that names the command and the reason, next to (not replacing) the
// tenant's failure notification; a success dismisses only the failure one.
func TestRefusedNotification(t *testing.T) {
	fake := fakeha.New(testToken)
	defer fake.Close()
	c, l, _ := startLink(t, fake)
	ctx := waitCtx(t)
	if err := c.WaitConnected(ctx); err != nil {
		t.Fatal(err)
	}
	l.Operation(opEvent("lab", "apply", tenant.ResultFailed))
	refused := opEvent("lab", "destroy", tenant.ResultRefused)
	refused.Message = `destroy of "lab" refused: turn on "Allow destroy" first`
	l.Operation(refused)
	if err := fake.WaitNotifications(ctx, func(n map[string]fakeha.Notification) bool { return len(n) == 2 }); err != nil {
		t.Fatal(err, fake.Notifications())
	}
	n, ok := fake.Notifications()[RefusedNotificationID("lab")]
	if !ok {
		t.Fatalf("no %s notification: %v", RefusedNotificationID("lab"), fake.Notifications())
	}
	for _, want := range []string{"destroy", "lab", "refused", "Allow destroy", "nothing was done"} {
		if !strings.Contains(n.Title+n.Message, want) {
			t.Errorf("notification lacks %q: %+v", want, n)
		}
	}
	if _, err := fake.WaitEvent(ctx, EventOperation, func(e fakeha.Event) bool {
		return strings.Contains(string(e.Data), `"result":"refused"`) && strings.Contains(string(e.Data), "Allow destroy")
	}); err != nil {
		t.Fatal(err)
	}
	l.Operation(opEvent("lab", "apply", tenant.ResultSucceeded))
	if err := fake.WaitNotifications(ctx, func(n map[string]fakeha.Notification) bool {
		_, failed := n[NotificationID("lab")]
		_, ref := n[RefusedNotificationID("lab")]
		return !failed && ref
	}); err != nil {
		t.Fatal(err, fake.Notifications())
	}
	if v := fake.Violations(); len(v) > 0 {
		t.Errorf("protocol violations: %v", v)
	}
}
