package simcloud

import (
	"fmt"
	"net/http"
	"slices"
	"time"
)

// newVolume builds a Cinder volume, available; c.mu is held.
func (c *Cloud) newVolume(id, name string, size int, imageID string) obj {
	now := stampNoZone(time.Now())
	v := obj{
		"id": id, "name": name, "size": size, "status": "available", "bootable": "false", "attachments": []any{},
		"volume_type": "__DEFAULT__", "availability_zone": "nova", "metadata": obj{}, "multiattach": false,
		"encrypted": false, "created_at": now, "updated_at": now, "description": nil, "user_id": c.userID,
		"os-vol-tenant-attr:tenant_id": c.projectID, "snapshot_id": nil, "source_volid": nil,
		"replication_status": nil, "consistencygroup_id": nil, "links": []any{},
	}
	if img, ok := c.images[imageID]; ok {
		v["bootable"] = "true"
		v["volume_image_metadata"] = obj{"image_id": imageID, "image_name": img["name"], "container_format": img["container_format"], "disk_format": img["disk_format"]}
	}
	return v
}

// attach marks volume v in use by a server.
func (c *Cloud) attach(v obj, serverID string, index int) {
	v["status"] = "in-use"
	v["attachments"] = []any{obj{"id": v["id"], "attachment_id": c.newIDStable("attachment", scalar(v["id"])), "volume_id": v["id"],
		"server_id": serverID, "device": device(index), "host_name": "simcloud", "attached_at": stampNoZone(time.Now())}}
}

// detach makes volume v available again.
func detach(v obj) {
	v["status"] = "available"
	v["attachments"] = []any{}
}

func cinderError(w http.ResponseWriter, status int, format string, args ...any) {
	key := map[int]string{http.StatusBadRequest: "badRequest", http.StatusNotFound: "itemNotFound"}[status]
	writeJSON(w, status, obj{key: obj{"code": status, "message": fmt.Sprintf(format, args...)}})
}

// cinder serves /volume/v3/{project}/volumes[/detail|/{id}].
func (c *Cloud) cinder(w http.ResponseWriter, r *http.Request, seg []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case len(seg) == 1 && seg[0] == "volumes" && r.Method == http.MethodPost:
		var req struct {
			Volume struct {
				Name     string `json:"name"`
				Size     int    `json:"size"`
				ImageRef string `json:"imageRef"`
			} `json:"volume"`
		}
		if err := decodeInto(r, &req); err != nil {
			cinderError(w, http.StatusBadRequest, "Invalid input: %v", err)
			return
		}
		if req.Volume.Size < 1 {
			cinderError(w, http.StatusBadRequest, "Invalid input received: size must be a positive integer, not %d", req.Volume.Size)
			return
		}
		if _, ok := c.images[req.Volume.ImageRef]; req.Volume.ImageRef != "" && !ok {
			cinderError(w, http.StatusBadRequest, "Invalid image identifier or unable to access requested image.")
			return
		}
		key := req.Volume.Name
		if key == "" {
			key = canon(req)
		}
		id := c.newID("volume", key)
		c.volumes[id] = c.newVolume(id, req.Volume.Name, req.Volume.Size, req.Volume.ImageRef)
		writeJSON(w, http.StatusAccepted, obj{"volume": c.volumes[id]})
	case len(seg) == 1 && seg[0] == "volumes" && r.Method == http.MethodGet,
		len(seg) == 2 && seg[0] == "volumes" && seg[1] == "detail" && r.Method == http.MethodGet:
		list := []any{}
		for _, id := range sortedKeys(c.volumes) {
			if c.matches(c.volumes[id], r) {
				list = append(list, c.volumes[id])
			}
		}
		writeJSON(w, http.StatusOK, obj{"volumes": list})
	case len(seg) == 2 && seg[0] == "volumes":
		v, ok := c.volumes[seg[1]]
		if !ok {
			cinderError(w, http.StatusNotFound, "Volume %s could not be found.", seg[1])
			return
		}
		switch r.Method {
		case http.MethodGet:
			writeJSON(w, http.StatusOK, obj{"volume": v})
		case http.MethodDelete:
			if st := v["status"]; !slices.Contains([]any{"available", "error"}, st) {
				cinderError(w, http.StatusBadRequest, "Invalid volume: Volume status must be available or error or error_restoring or error_extending or error_managing and must not be migrating, attached, belong to a group, have snapshots, awaiting a transfer, or be disassociated from snapshots after volume transfer.")
				return
			}
			delete(c.volumes, seg[1])
			w.WriteHeader(http.StatusAccepted)
		default:
			c.notImplementedLocked(w, r)
		}
	default:
		c.notImplementedLocked(w, r)
	}
}

// glance serves /image/v2/images[/{id}].
func (c *Cloud) glance(w http.ResponseWriter, r *http.Request, seg []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case len(seg) == 1 && seg[0] == "images" && r.Method == http.MethodGet:
		list := []any{}
		for _, id := range sortedKeys(c.images) {
			if c.matches(c.images[id], r) {
				list = append(list, c.images[id])
			}
		}
		writeJSON(w, http.StatusOK, obj{"images": list, "first": "/v2/images", "schema": "/v2/schemas/images"})
	case len(seg) == 2 && seg[0] == "images" && r.Method == http.MethodGet:
		img, ok := c.images[seg[1]]
		if !ok {
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(http.StatusNotFound)
			_, _ = fmt.Fprintf(w, "404 Not Found\n\nNo image found with ID %s\n", seg[1])
			return
		}
		writeJSON(w, http.StatusOK, img)
	default:
		c.notImplementedLocked(w, r)
	}
}
