//go:build tools

// Package deps pins modules that packages under construction will import; removed once they do.
package dep

import (
	_ "github.com/cosi-project/runtime/pkg/state/impl/inmem"
	_ "github.com/cosi-project/runtime/pkg/state/protobuf/server"
	_ "github.com/eclipse/paho.mqtt.golang"
	_ "github.com/gorilla/websocket"
	_ "github.com/hashicorp/terraform-json"
	_ "github.com/mochi-mqtt/server/v2"
	_ "github.com/pelletier/go-toml/v2"
	_ "github.com/siderolabs/talos/pkg/machinery/client"
	_ "github.com/siderolabs/talos/pkg/machinery/compatibility"
	_ "github.com/siderolabs/talos/pkg/machinery/config/generate"
	_ "go.uber.org/zap"
)
