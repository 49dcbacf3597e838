package bridge

import (
	"encoding/json"
	"slices"
	"sync"
)

// Tasks (MCP 2025-11-25's task-augmented requests): a call whose params
// carry task is answered at once with the task the server made for it
// ({"task": {"taskId": …, "status": …}}), and its requester asks about
// it later with tasks/get, tasks/result, tasks/list and tasks/cancel. The
// server sees one client, the bridge, whose tasks belong to many
// requesters: the bridge remembers whose each task is, passes a request
// about a task to the server only from that task's requester (another is
// answered -32602, as for a task that does not exist), lists each
// requester its own tasks alone, and asks a task's questions (what the
// server asks while the task is input_required) of its requester
// (questions.go).

// maxTasks bounds the tasks remembered; past it the oldest is forgotten,
// and its requester can no longer ask about it through the bridge.
const maxTasks = 4096

// taskOwners are the requesters of the tasks the server made, by taskId.
type taskOwners struct {
	mu    sync.Mutex
	owner map[string]string
	order []string
}

func newTaskOwners() *taskOwners { return &taskOwners{owner: map[string]string{}} }

// made records the task a task-augmented call's answer names, if any.
func (t *taskOwners) made(requester string, result json.RawMessage) {
	var r struct {
		Task *struct {
			TaskID string `json:"taskId"`
		} `json:"task"`
	}
	if json.Unmarshal(result, &r) != nil || r.Task == nil || r.Task.TaskID == "" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.owner[r.Task.TaskID]; !ok {
		t.order = append(t.order, r.Task.TaskID)
		for len(t.order) > maxTasks {
			delete(t.owner, t.order[0])
			t.order = t.order[1:]
		}
	}
	t.owner[r.Task.TaskID] = requester
}

// ownerOf is the requester of task id, or "".
func (t *taskOwners) ownerOf(id string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.owner[id]
}

// isTaskRequest reports whether method names a task (params.taskId).
func isTaskRequest(method string) bool {
	switch method {
	case "tasks/get", "tasks/result", "tasks/cancel":
		return true
	}
	return false
}

// mayAsk reports whether requester may make a request of method about the
// task its params name: only the task's own requester may.
func (t *taskOwners) mayAsk(requester, method string, params json.RawMessage) bool {
	if !isTaskRequest(method) {
		return true
	}
	var p struct {
		TaskID string `json:"taskId"`
	}
	_ = json.Unmarshal(params, &p)
	return p.TaskID != "" && t.ownerOf(p.TaskID) == requester
}

// ownList keeps, of a tasks/list result, the requester's own tasks.
func (t *taskOwners) ownList(requester string, result json.RawMessage) json.RawMessage {
	res, ok := object(result)
	if !ok {
		return result
	}
	var tasks []json.RawMessage
	if json.Unmarshal(res["tasks"], &tasks) != nil {
		return result
	}
	mine := []json.RawMessage{}
	for _, task := range tasks {
		var x struct {
			TaskID string `json:"taskId"`
		}
		if json.Unmarshal(task, &x) == nil && t.ownerOf(x.TaskID) == requester {
			mine = append(mine, task)
		}
	}
	res["tasks"] = encode(mine)
	return encode(res)
}

// callOf is the call in flight on session s of task id's requester that
// its questions go with: the requester's tasks/result of that task (where
// MCP 2025-11-25 has the server ask them), else its one call in flight.
func (t *taskOwners) callOf(calls *inflight, s *session, id string) *call {
	owner := t.ownerOf(id)
	if owner == "" {
		return nil
	}
	var mine []*call
	for _, c := range calls.ofSession(s) {
		if c.requester == owner {
			mine = append(mine, c)
		}
	}
	if i := slices.IndexFunc(mine, func(c *call) bool { return c.method == "tasks/result" && c.task == id }); i >= 0 {
		return mine[i]
	}
	if len(mine) == 1 {
		return mine[0]
	}
	return nil
}
