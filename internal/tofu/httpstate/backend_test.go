package httpstate_test

import (
	"testing"

	"github.com/rezuscloud/rezuscloud/internal/tofu/httpstate"
	"github.com/rezuscloud/rezuscloud/internal/tofu/httpstate/httpstatetest"
)

func TestStateFileBackend(t *testing.T) {
	httpstatetest.Run(t, func(t *testing.T) httpstate.Backend {
		s, err := httpstate.Open(t.TempDir(), 0)
		if err != nil {
			t.Fatal(err)
		}
		return s.Backend()
	})
}
