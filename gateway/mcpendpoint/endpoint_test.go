package mcpendpoint

import (
	"context"
	"testing"
	"time"

	"github.com/mcpp/gateway/wire"
)

// TestListsWithoutParams: a host of a revision with sessions lists
// resources, resource templates and prompts without params (the SDK's
// client sends none when given none), and gets the lists: the inbox's
// template among them, nothing else while the pod has no server.
func TestListsWithoutParams(t *testing.T) {
	tp := newTestPod(t)
	host := tp.host("claude", wire.Kinds("chat"), sessionsVersion)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	templates, err := host.ListResourceTemplates(ctx, nil)
	if err != nil || len(templates.ResourceTemplates) != 1 || templates.ResourceTemplates[0].URITemplate != inboxTemplate {
		t.Fatalf("resources/templates/list: %v %+v", err, templates)
	}
	if resources, err := host.ListResources(ctx, nil); err != nil || len(resources.Resources) != 0 {
		t.Fatalf("resources/list: %v %+v", err, resources)
	}
	if prompts, err := host.ListPrompts(ctx, nil); err != nil || len(prompts.Prompts) != 0 {
		t.Fatalf("prompts/list: %v %+v", err, prompts)
	}
}
