package wsapi

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/rezuscloud/rezuscloud/internal/pool"
)

// PoolInputsOptions configure PoolInputs.
type PoolInputsOptions struct {
	// PriceEntity and BatteryEntity are the [pool] options ("" = none).
	PriceEntity, BatteryEntity string
	// PrefsInterval is how often the Energy preferences are read again
	// (default 10 min; also after every reconnection).
	PrefsInterval time.Duration
	// ForecastInterval is how often a forecast is asked of the price
	// integration's service, where its attributes give none (default
	// 30 min).
	ForecastInterval time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// PoolInputs follows what the worker pools read of Home Assistant: the
// power sensors its Energy preferences name (solar, grid, battery), the
// price entity and its forecast, the battery level and the machines' plug
// sensors. It keeps them up to date with one subscribe_entities
// subscription and answers the pool's inputs at any time. With a disabled
// client it reports nothing configured (the pools follow the pods).
type PoolInputs struct {
	c    *Client
	o    PoolInputsOptions
	log  *zap.Logger
	kick chan struct{}

	mu        sync.Mutex
	states    EntityStates
	sensors   EnergySensors
	prefsRead bool
	prefsErr  string
	plugs     []string
	following []string
	cancel    func()
	serviced  []pool.Slot // a forecast from the price integration's service
}

// NewPoolInputs makes the follower; Run it.
func NewPoolInputs(c *Client, o PoolInputsOptions, log *zap.Logger) *PoolInputs {
	if log == nil {
		log = zap.NewNop()
	}
	if o.PrefsInterval <= 0 {
		o.PrefsInterval = 10 * time.Minute
	}
	if o.ForecastInterval <= 0 {
		o.ForecastInterval = 30 * time.Minute
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &PoolInputs{c: c, o: o, log: log, kick: make(chan struct{}, 1), states: EntityStates{}}
}

// SetPlugs sets the plug sensors to follow (the machines' power_sensor).
func (p *PoolInputs) SetPlugs(entities []string) {
	s := slices.Clone(entities)
	slices.Sort(s)
	s = slices.Compact(s)
	p.mu.Lock()
	changed := !slices.Equal(s, p.plugs)
	p.plugs = s
	p.mu.Unlock()
	if changed {
		select {
		case p.kick <- struct{}{}:
		default:
		}
	}
}

// Run reads the preferences and follows the entities until ctx ends.
func (p *PoolInputs) Run(ctx context.Context) error {
	if p.c.Disabled() {
		return nil
	}
	defer func() {
		p.mu.Lock()
		if p.cancel != nil {
			p.cancel()
			p.cancel = nil
		}
		p.mu.Unlock()
	}()
	var prefsAt, forecastAt time.Time
	for {
		if err := p.c.WaitConnected(ctx); err != nil {
			return nil
		}
		now := p.o.Now()
		retry := p.o.PrefsInterval
		if prefsAt.IsZero() || now.Sub(prefsAt) >= p.o.PrefsInterval || !p.prefsOK() {
			if err := p.readPrefs(ctx); err != nil {
				p.log.Warn("energy preferences not read", zap.Error(err))
				retry = 5 * time.Second
			} else {
				prefsAt = now
			}
		}
		p.follow()
		if p.o.PriceEntity != "" && (forecastAt.IsZero() || now.Sub(forecastAt) >= p.o.ForecastInterval) {
			if p.askForecast(ctx) {
				forecastAt = now
			}
		}
		wctx, stop := context.WithCancel(ctx)
		select {
		case <-ctx.Done():
		case <-p.kick:
		case <-p.disconnected(wctx):
			prefsAt = time.Time{} // read them again on the new connection
		case <-time.After(retry):
		}
		stop()
		if ctx.Err() != nil {
			return nil
		}
	}
}

// disconnected is closed when the client loses its connection (it looks
// every second until ctx ends).
func (p *PoolInputs) disconnected(ctx context.Context) <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if !p.c.Connected() {
					close(ch)
					return
				}
			}
		}
	}()
	return ch
}

func (p *PoolInputs) prefsOK() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.prefsRead && p.prefsErr == ""
}

func (p *PoolInputs) readPrefs(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	prefs, err := p.c.GetEnergyPrefs(cctx)
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		p.prefsErr = err.Error()
		return err
	}
	s := prefs.Sensors()
	if !p.prefsRead || !reflect.DeepEqual(s, p.sensors) {
		p.log.Info("energy preferences", zap.Int("solar", len(s.Solar)), zap.Int("grid", len(s.Grid)),
			zap.Int("battery", len(s.Battery)), zap.Strings("entities", s.Entities()))
	}
	p.sensors, p.prefsRead, p.prefsErr = s, true, ""
	return nil
}

// follow makes the subscription cover every entity wanted now.
func (p *PoolInputs) follow() {
	p.mu.Lock()
	want := p.sensors.Entities()
	for _, e := range []string{p.o.PriceEntity, p.o.BatteryEntity} {
		if e != "" {
			want = append(want, e)
		}
	}
	want = append(want, p.plugs...)
	slices.Sort(want)
	want = slices.Compact(want)
	if slices.Equal(want, p.following) && p.cancel != nil {
		p.mu.Unlock()
		return
	}
	if p.cancel != nil {
		p.cancel()
	}
	for id := range p.states {
		if !slices.Contains(want, id) {
			delete(p.states, id)
		}
	}
	p.following = want
	p.mu.Unlock()
	if len(want) == 0 {
		p.mu.Lock()
		p.cancel = func() {}
		p.mu.Unlock()
		return
	}
	cancel := p.c.SubscribeEntities(want, func(ev json.RawMessage) {
		p.mu.Lock()
		_, had := p.states[p.o.PriceEntity]
		if err := p.states.Apply(ev); err != nil {
			p.log.Warn("home assistant entity states", zap.Error(err))
		}
		_, has := p.states[p.o.PriceEntity]
		p.mu.Unlock()
		if p.o.PriceEntity != "" && !had && has { // now its forecast can be looked for
			select {
			case p.kick <- struct{}{}:
			default:
			}
		}
	})
	p.mu.Lock()
	p.cancel = cancel
	p.mu.Unlock()
}

// Energy is the pool's energy input now.
func (p *PoolInputs) Energy() pool.Energy {
	if p.c.Disabled() {
		return pool.Energy{}
	}
	if !p.c.Connected() {
		return pool.Energy{Err: "not connected to its WebSocket API"}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.prefsRead {
		msg := "its Energy preferences are not read yet"
		if p.prefsErr != "" {
			msg = "its Energy preferences cannot be read: " + p.prefsErr
		}
		return pool.Energy{Err: msg}
	}
	read := func(e string) pool.Reading {
		st, ok := p.states[e]
		return powerReading(e, st, ok)
	}
	e := pool.Energy{Solar: combine(p.sensors.Solar, read), Grid: combine(p.sensors.Grid, read),
		Battery: combine(p.sensors.Battery, read)}
	if b := p.o.BatteryEntity; b != "" {
		e.BatteryLevel = p.number(b)
	}
	return e
}

// number is an entity's state as a reading. Callers hold p.mu.
func (p *PoolInputs) number(entity string) pool.Reading {
	st, ok := p.states[entity]
	if !ok {
		return pool.Reading{Entity: entity, Raw: "unknown"}
	}
	return pool.Number(entity, st.State)
}

// Price is the price now and its forecast (the entity's attributes, else
// the price integration's service response, brought to the entity's
// unit).
func (p *PoolInputs) Price() pool.Price {
	if p.o.PriceEntity == "" {
		return pool.Price{}
	}
	if p.c.Disabled() { // configured, but there is no link to read it
		return pool.Price{Now: pool.Reading{Entity: p.o.PriceEntity}}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	pr := pool.Price{Now: p.number(p.o.PriceEntity)}
	if st, ok := p.states[p.o.PriceEntity]; ok {
		pr.Forecast = ForecastFromAttributes(st.Attributes)
	}
	if len(pr.Forecast) == 0 {
		pr.Forecast = slices.Clone(p.serviced)
	}
	if v, ok := pr.Now.Known(); ok {
		pr.Forecast = rescale(pr.Forecast, p.o.Now(), v)
	}
	return pr
}

// Plug is a plug sensor's power reading (W).
func (p *PoolInputs) Plug(entity string) pool.Reading {
	if entity == "" {
		return pool.Reading{}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	st, ok := p.states[entity]
	return powerReading(entity, st, ok)
}

// forecastService is how a price integration gives its forecast.
type forecastService struct {
	domain, service string
	data            func(entry string, day time.Time) map[string]any
	perDay          bool // one call per day (today and tomorrow)
}

// forecastServices are the core integrations whose price sensors carry no
// forecast attribute but whose service returns one, by entity platform.
var forecastServices = map[string]forecastService{
	"nordpool": {domain: "nordpool", service: "get_prices_for_date", perDay: true,
		data: func(entry string, day time.Time) map[string]any {
			return map[string]any{"config_entry": entry, "date": day.Format(time.DateOnly)}
		}},
	"tibber": {domain: "tibber", service: "get_prices",
		data: func(_ string, day time.Time) map[string]any {
			return map[string]any{"start": day.Format("2006-01-02 15:04:05"), "end": day.AddDate(0, 0, 2).Format("2006-01-02 15:04:05")}
		}},
	"energyzero": {domain: "energyzero", service: "get_energy_prices",
		data: func(entry string, day time.Time) map[string]any {
			return map[string]any{"config_entry": entry, "incl_vat": true, "start": day.Format(time.RFC3339), "end": day.AddDate(0, 0, 2).Format(time.RFC3339)}
		}},
	"easyenergy": {domain: "easyenergy", service: "get_energy_usage_prices",
		data: func(entry string, day time.Time) map[string]any {
			return map[string]any{"config_entry": entry, "incl_vat": true, "start": day.Format(time.RFC3339), "end": day.AddDate(0, 0, 2).Format(time.RFC3339)}
		}},
}

// askForecast asks the price integration's service for a forecast when
// the entity's attributes carry none; it reports whether it is done for
// this interval (nothing to ask, or asked).
func (p *PoolInputs) askForecast(ctx context.Context) bool {
	p.mu.Lock()
	st, ok := p.states[p.o.PriceEntity]
	p.mu.Unlock()
	if !ok {
		return false // its state has not come yet
	}
	if len(ForecastFromAttributes(st.Attributes)) > 0 {
		return true
	}
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	raw, err := p.c.Call(cctx, map[string]any{"type": "config/entity_registry/get", "entity_id": p.o.PriceEntity})
	var entry struct {
		Platform      string `json:"platform"`
		ConfigEntryID string `json:"config_entry_id"`
	}
	if err == nil {
		err = json.Unmarshal(raw, &entry)
	}
	var herr *Error
	if errors.As(err, &herr) && herr.Code == "not_found" {
		return true // a template or YAML sensor: no integration to ask
	}
	if err != nil {
		p.log.Debug("price entity's registry entry", zap.Error(err))
		return false
	}
	svc, ok := forecastServices[entry.Platform]
	if !ok {
		return true
	}
	now := p.o.Now()
	y, m, d := now.Date()
	today := time.Date(y, m, d, 0, 0, 0, 0, now.Location())
	days := []time.Time{today}
	if svc.perDay {
		days = append(days, today.AddDate(0, 0, 1))
	}
	var slots []pool.Slot
	for i, day := range days {
		resp, err := p.c.CallServiceResponse(cctx, svc.domain, svc.service, svc.data(entry.ConfigEntryID, day))
		if err != nil {
			if i == 0 {
				p.log.Info("no price forecast from the price integration", zap.String("service", svc.domain+"."+svc.service), zap.Error(err))
				return true
			}
			continue // tomorrow's prices come in the afternoon
		}
		slots = append(slots, ForecastFromResponse(resp)...)
	}
	p.mu.Lock()
	p.serviced = normalise(slots)
	p.mu.Unlock()
	return true
}
