package config

import (
	"testing"
)

// TestPoolEntities: [pool] price_entity and battery_entity are optional
// entity ids; anything else is an error naming the key.
func TestPoolEntities(t *testing.T) {
	tests := []struct {
		name, body     string
		price, battery string
		err            string
	}{
		{"absent", "", "", "", ""},
		{"both", "[pool]\nprice_entity = \"sensor.nordpool_kwh_se3_eur_3_10_025\"\nbattery_entity = \"sensor.battery_soc\"",
			"sensor.nordpool_kwh_se3_eur_3_10_025", "sensor.battery_soc", ""},
		{"bad price", "[pool]\nprice_entity = \"nordpool\"", "", "", `pool.price_entity: "nordpool" is not a Home Assistant entity id`},
		{"bad battery", "[pool]\nbattery_entity = \"sensor.Battery\"", "", "", "pool.battery_entity"},
		{"misspelt", "[pool]\nprice_entiti = \"sensor.x\"", "", "", "pool.price_entiti: unknown key"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := LoadFile(writeFile(t, "c.toml", tc.body))
			if !loadedAsWanted(t, err, tc.err) {
				return
			}
			if c.Pool.PriceEntity != tc.price || c.Pool.BatteryEntity != tc.battery {
				t.Errorf("pool = %+v", c.Pool)
			}
		})
	}
}
