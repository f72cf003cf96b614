package wsapi

import (
	"encoding/json"
	"maps"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/pool"
)

// Price forecasts come in a few shapes, all lists of objects with a start
// time and a price (the integrations' own code; TheFes/cheapest-energy-
// hours keeps a table of them):
//
//   - Nord Pool (custom, HACS): attributes raw_today and raw_tomorrow,
//     [{start, end, value}] (hourly, or 15-minute since 2025);
//   - ENTSO-e (HACS): prices_today and prices_tomorrow, [{time, price}];
//   - Amber Electric: forecasts, [{start_time, end_time, per_kwh}];
//   - Frank Energie: prices, [{from, till, price}];
//   - Octopus Energy (HACS): rates, [{start, end, value_inc_vat}];
//   - Zonneplan: forecast, [{datetime, electricity_price}];
//   - service responses: nordpool.get_prices_for_date (core)
//     {area: [{start, end, price}]}, tibber.get_prices {prices: {home:
//     [{start_time, price}]}}, energyzero.get_energy_prices and
//     easyenergy.get_energy_usage_prices {prices: [{timestamp, price}]}.

// forecastAttrs are the attributes that hold forecast lists, in the order
// they are tried.
var forecastAttrs = []string{"raw_today", "raw_tomorrow", "prices_today", "prices_tomorrow", "prices",
	"forecasts", "forecast", "rates", "data"}

var (
	startKeys = []string{"start", "start_time", "time", "from", "timestamp", "datetime", "valid_from", "startsAt"}
	endKeys   = []string{"end", "end_time", "till", "to", "valid_to", "endsAt"}
	priceKeys = []string{"value", "price", "per_kwh", "value_inc_vat", "value_incl_vat", "electricity_price", "total"}
)

// ForecastFromAttributes reads a price forecast from a price entity's
// attributes; nil when they hold none.
func ForecastFromAttributes(attrs map[string]any) []pool.Slot {
	var slots []pool.Slot
	for _, k := range forecastAttrs {
		if l, ok := attrs[k].([]any); ok {
			slots = append(slots, slotsOf(l)...)
		}
	}
	return normalise(slots)
}

// ForecastFromResponse reads a price forecast from a service response: the
// first list of price slots found, by key order, up to three levels deep.
func ForecastFromResponse(raw json.RawMessage) []pool.Slot {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return nil
	}
	return normalise(findSlots(v, 0))
}

func findSlots(v any, depth int) []pool.Slot {
	switch x := v.(type) {
	case []any:
		return slotsOf(x)
	case map[string]any:
		if depth >= 3 {
			return nil
		}
		for _, k := range slices.Sorted(maps.Keys(x)) {
			if s := findSlots(x[k], depth+1); len(s) > 0 {
				return s
			}
		}
	}
	return nil
}

// slotsOf reads the items of one list that have a start time and a
// number price (a null price, as Nord Pool gives for a missing hour, is
// skipped); End is zero when the item has none.
func slotsOf(l []any) []pool.Slot {
	var out []pool.Slot
	for _, it := range l {
		m, ok := it.(map[string]any)
		if !ok {
			continue
		}
		start, ok := timeOf(m, startKeys)
		if !ok {
			continue
		}
		price, ok := priceOf(m)
		if !ok {
			continue
		}
		end, _ := timeOf(m, endKeys)
		out = append(out, pool.Slot{Start: start, End: end, Price: price})
	}
	return out
}

func timeOf(m map[string]any, keys []string) (time.Time, bool) {
	for _, k := range keys {
		s, ok := m[k].(string)
		if !ok {
			continue
		}
		for _, layout := range []string{time.RFC3339Nano, "2006-01-02 15:04:05Z07:00", "2006-01-02 15:04:05.999999Z07:00"} {
			if t, err := time.Parse(layout, s); err == nil {
				return t, true
			}
		}
	}
	return time.Time{}, false
}

func priceOf(m map[string]any) (float64, bool) {
	for _, k := range priceKeys {
		switch v := m[k].(type) {
		case float64:
			if !math.IsNaN(v) && !math.IsInf(v, 0) {
				return v, true
			}
		case string:
			if f, err := strconv.ParseFloat(v, 64); err == nil && !math.IsNaN(f) && !math.IsInf(f, 0) {
				return f, true
			}
		}
	}
	return 0, false
}

// normalise sorts slots by start, drops duplicates, and gives a slot
// without an end the next slot's start (the last one the length of the one
// before it, or an hour).
func normalise(slots []pool.Slot) []pool.Slot {
	if len(slots) == 0 {
		return nil
	}
	slices.SortStableFunc(slots, func(a, b pool.Slot) int { return a.Start.Compare(b.Start) })
	slots = slices.CompactFunc(slots, func(a, b pool.Slot) bool { return a.Start.Equal(b.Start) })
	for i := range slots {
		if !slots[i].End.After(slots[i].Start) {
			switch {
			case i+1 < len(slots):
				slots[i].End = slots[i+1].Start
			case i > 0:
				slots[i].End = slots[i].Start.Add(slots[i-1].End.Sub(slots[i-1].Start))
			default:
				slots[i].End = slots[i].Start.Add(time.Hour)
			}
		}
	}
	return slots
}

// rescale brings a forecast to the price entity's unit when they differ
// by a power of ten (core Nord Pool answers per MWh while its sensor shows
// per kWh; some show cents): the current slot's price is compared with
// the entity's state.
func rescale(slots []pool.Slot, now time.Time, state float64) []pool.Slot {
	var cur *pool.Slot
	for i := range slots {
		if !now.Before(slots[i].Start) && now.Before(slots[i].End) {
			cur = &slots[i]
		}
	}
	if cur == nil || cur.Price == 0 || state == 0 || (cur.Price > 0) != (state > 0) {
		return slots
	}
	ratio := state / cur.Price
	for _, f := range []float64{1e-3, 1e-2, 1e-1, 10, 100, 1000} {
		if math.Abs(ratio/f-1) < 0.05 {
			out := slices.Clone(slots)
			for i := range out {
				out[i].Price *= f
			}
			return out
		}
	}
	return slots
}
