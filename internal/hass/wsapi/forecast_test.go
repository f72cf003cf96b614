package wsapi

import (
	"encoding/json"
	"testing"
	"time"
)

func attrsOf(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestForecastShapes(t *testing.T) {
	tests := []struct {
		name       string
		attrs      string // price entity attributes
		response   string // or a service response
		n          int
		first      string // start of the first slot
		firstPrice float64
		slot       time.Duration // length of the first slot
	}{
		{"nordpool custom, 15-minute, a null", `{"unit":"kWh","raw_today":[
			{"start":"2026-06-21T00:00:00+02:00","end":"2026-06-21T00:15:00+02:00","value":0.211},
			{"start":"2026-06-21T00:15:00+02:00","end":"2026-06-21T00:30:00+02:00","value":null},
			{"start":"2026-06-21T00:30:00+02:00","end":"2026-06-21T00:45:00+02:00","value":0.190}],
			"raw_tomorrow":[{"start":"2026-06-22T00:00:00+02:00","end":"2026-06-22T00:15:00+02:00","value":0.2}],"tomorrow_valid":true}`,
			"", 3, "2026-06-21T00:00:00+02:00", 0.211, 15 * time.Minute},
		{"entso-e", `{"prices_today":[{"time":"2026-06-21T00:00:00+02:00","price":0.12},{"time":"2026-06-21T01:00:00+02:00","price":0.11}],
			"prices_tomorrow":[],"prices":[{"time":"2026-06-21T00:00:00+02:00","price":0.12}]}`,
			"", 2, "2026-06-21T00:00:00+02:00", 0.12, time.Hour},
		{"amber", `{"forecasts":[{"duration":30,"start_time":"2026-06-21T10:00:01+00:00","end_time":"2026-06-21T10:30:00+00:00","per_kwh":0.31,"renewables":40}]}`,
			"", 1, "2026-06-21T10:00:01Z", 0.31, 30*time.Minute - time.Second},
		{"octopus", `{"rates":[{"start":"2026-06-21T10:00:00+01:00","end":"2026-06-21T10:30:00+01:00","value_inc_vat":0.1521,"is_capped":false}]}`,
			"", 1, "2026-06-21T10:00:00+01:00", 0.1521, 30 * time.Minute},
		{"no forecast", `{"unit_of_measurement":"EUR/kWh","friendly_name":"Price"}`, "", 0, "", 0, 0},
		{"core nordpool service", "", `{"SE3":[{"start":"2026-06-20T22:00:00+00:00","end":"2026-06-20T22:15:00+00:00","price":412.7},
			{"start":"2026-06-20T22:15:00+00:00","end":"2026-06-20T22:30:00+00:00","price":398.1}]}`,
			2, "2026-06-20T22:00:00Z", 412.7, 15 * time.Minute},
		{"tibber service", "", `{"prices":{"Home":[{"start_time":"2026-06-21T00:00:00.000+02:00","price":0.2451},
			{"start_time":"2026-06-21T01:00:00.000+02:00","price":0.2312}]}}`,
			2, "2026-06-21T00:00:00+02:00", 0.2451, time.Hour},
		{"energyzero service", "", `{"prices":[{"timestamp":"2026-06-20 22:00:00+00:00","price":0.09},{"timestamp":"2026-06-20 23:00:00+00:00","price":0.08}]}`,
			2, "2026-06-20T22:00:00Z", 0.09, time.Hour},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got = ForecastFromResponse(json.RawMessage(tc.response))
			if tc.attrs != "" {
				got = ForecastFromAttributes(attrsOf(t, tc.attrs))
			}
			if len(got) != tc.n {
				t.Fatalf("got %d slots: %+v", len(got), got)
			}
			if tc.n == 0 {
				return
			}
			first, _ := time.Parse(time.RFC3339, tc.first)
			if !got[0].Start.Equal(first) || got[0].Price != tc.firstPrice || got[0].End.Sub(got[0].Start) != tc.slot {
				t.Fatalf("first slot %+v", got[0])
			}
			for i := 1; i < len(got); i++ {
				if !got[i].Start.After(got[i-1].Start) {
					t.Fatalf("not sorted: %+v", got)
				}
			}
		})
	}
}

func TestForecastRescale(t *testing.T) {
	slots := ForecastFromResponse(json.RawMessage(`{"SE3":[{"start":"2026-06-21T10:00:00+00:00","end":"2026-06-21T11:00:00+00:00","price":412.7},
		{"start":"2026-06-21T11:00:00+00:00","end":"2026-06-21T12:00:00+00:00","price":200}]}`))
	now := time.Date(2026, 6, 21, 10, 30, 0, 0, time.UTC)
	got := rescale(slots, now, 0.4127) // the sensor shows per kWh
	if got[0].Price < 0.41 || got[0].Price > 0.42 || got[1].Price != 0.2 {
		t.Fatalf("per MWh to per kWh: %+v", got)
	}
	if got := rescale(slots, now, 0.52); got[0].Price != 412.7 {
		t.Fatalf("a state with additions (not a power of ten) rescaled: %+v", got)
	}
}
