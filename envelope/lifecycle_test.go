package envelope

import (
	"strings"
	"testing"

	"github.com/mcpp/gateway/wire"
)

func TestLifecycleAccepts(t *testing.T) {
	ids := make([]string, 64)
	for i := range ids {
		ids[i] = `"e` + strings.Repeat("x", i) + `"`
	}
	cases := []struct {
		name, lifecycle string
		mode            Mode
		consumes        int
	}{
		{"durable", `{"mode":"durable"}`, ModeDurable, 0},
		{"empty object is durable", `{}`, ModeDurable, 0},
		{"transient", `{"mode":"transient","summary":"15 records"}`, ModeTransient, 0},
		{"summary of 1024 bytes", `{"mode":"transient","summary":"` + strings.Repeat("s", 1024) + `"}`, ModeTransient, 0},
		{"ephemeral", `{"mode":"ephemeral"}`, ModeEphemeral, 0},
		{"consumes alone", `{"consumes":["env-41","env-44"]}`, ModeDurable, 2},
		{"consumes with transient", `{"mode":"transient","summary":"s","consumes":["a"]}`, ModeTransient, 1},
		{"consumes with ephemeral", `{"mode":"ephemeral","consumes":["a"]}`, ModeEphemeral, 1},
		{"64 consumed ids", `{"consumes":[` + strings.Join(ids, ",") + `]}`, ModeDurable, 64},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var e Envelope
			if err := e.Parse([]byte(`{"kind":"k","lifecycle":` + c.lifecycle + `}`)); err != nil {
				t.Fatalf("refused: %v", err)
			}
			if e.Mode != c.mode || len(e.Consumes) != c.consumes {
				t.Fatalf("mode %d consumes %v, want %d and %d ids", e.Mode, e.Consumes, c.mode, c.consumes)
			}
		})
	}
}

func TestLifecycleRefuses(t *testing.T) {
	ids := make([]string, 65)
	for i := range ids {
		ids[i] = `"e"`
	}
	for name, lifecycle := range map[string]string{
		"null":                    `null`,
		"string":                  `"transient"`,
		"array":                   `[]`,
		"unknown key":             `{"mode":"durable","ttl":5}`,
		"mode twice":              `{"mode":"durable","mode":"ephemeral"}`,
		"unknown mode":            `{"mode":"forever"}`,
		"mode null":               `{"mode":null}`,
		"mode number":             `{"mode":1}`,
		"transient, no summary":   `{"mode":"transient"}`,
		"summary empty":           `{"mode":"transient","summary":""}`,
		"summary 1025 bytes":      `{"mode":"transient","summary":"` + strings.Repeat("s", 1025) + `"}`,
		"summary not a string":    `{"mode":"transient","summary":{"a":1}}`,
		"summary without mode":    `{"summary":"s"}`,
		"summary with durable":    `{"mode":"durable","summary":"s"}`,
		"summary with ephemeral":  `{"mode":"ephemeral","summary":"s"}`,
		"consumes empty":          `{"consumes":[]}`,
		"consumes 65":             `{"consumes":[` + strings.Join(ids, ",") + `]}`,
		"consumes a string":       `{"consumes":"e1"}`,
		"consumes a number":       `{"consumes":[1]}`,
		"consumes an empty id":    `{"consumes":[""]}`,
		"consumes a 129-byte id":  `{"consumes":["` + strings.Repeat("x", 129) + `"]}`,
		"consumes null":           `{"consumes":null}`,
		"consumes holding a null": `{"consumes":["a",null]}`,
	} {
		t.Run(name, func(t *testing.T) {
			var e Envelope
			err := e.Parse([]byte(`{"kind":"k","lifecycle":` + lifecycle + `}`))
			if err == nil || err.Code != wire.CodeInvalidEnvelope || err.Message == "" {
				t.Fatalf("lifecycle %.60s: %v, want invalid_envelope", lifecycle, err)
			}
		})
	}
	var e Envelope
	if err := e.Parse([]byte(`{"kind":"k","lifecycle":{},"lifecycle":{}}`)); err == nil || err.Code != wire.CodeInvalidEnvelope {
		t.Fatalf("lifecycle twice: %v", err)
	}
}

func TestFrameCarriesHistoryFields(t *testing.T) {
	m := Meta{Kind: FrameEnvelope, Flags: FlagTransient | FlagLive, Origin: "n1", From: "a", ID: "env-1",
		Consumes: []string{"x", "y"}, Seq: 3, Incarnation: "c1"}
	var got Meta
	body, err := DecodeFrame(AppendFrame(nil, &m, []byte(`{}`)), &got)
	if err != nil || string(body) != `{}` {
		t.Fatalf("decode: %v %q", err, body)
	}
	if got.ID != "env-1" || got.Incarnation != "c1" || strings.Join(got.Consumes, ",") != "x,y" || got.Seq != 3 || !got.Transient() || !got.Live() || got.Marker() {
		t.Fatalf("decoded %+v", got)
	}
}
