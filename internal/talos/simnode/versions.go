package simnode

import "strings"

// KubeletVersion is the kubelet version the node's config names ("1.35.0",
// no "v"); "" before it has a config.
func (n *Node) KubeletVersion() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cfg == nil || n.cfg.Machine() == nil {
		return ""
	}
	img := n.cfg.Machine().Kubelet().Image()
	i := strings.LastIndexByte(img, ':')
	if i < 0 {
		return ""
	}
	return strings.TrimPrefix(img[i+1:], "v")
}
