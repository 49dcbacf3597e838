package envelope

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"sync"

	"github.com/tidwall/gjson"
)

// DecodePayload reads the payload of an envelope the gateway acts on (a
// gateway/* request, a capability/grant, a proposal's decision) into v, a
// pointer to a struct, the one way the gateway reads payloads
// (docs/protocol.md section 2). The payload must be a JSON object. Its
// keys are matched to v's fields by their JSON names exactly, as a payload
// pattern matches them: a key that equals a field's name only ignoring case
// ("Participant") is refused rather than read as that field, as Go's
// encoding/json alone would. With strict, any other key is refused too.
//
// Call it on payloads capability.Ambiguous has passed: then every key is
// read by the gateway, by a pattern and by any receiver as one and the
// same field.
func DecodePayload(payload []byte, v any, strict bool) error {
	trimmed := bytes.TrimLeft(payload, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return fmt.Errorf("the payload is not an object")
	}
	names := jsonNames(reflect.TypeOf(v).Elem())
	var bad error
	gjson.ParseBytes(trimmed).ForEach(func(k, _ gjson.Result) bool {
		if names[k.Str] {
			return true
		}
		for name := range names {
			if strings.EqualFold(name, k.Str) {
				bad = fmt.Errorf("key %q: keys are case-sensitive; the field is %q", k.Str, name)
				return false
			}
		}
		if strict {
			bad = fmt.Errorf("unknown key %q", k.Str)
			return false
		}
		return true
	})
	if bad != nil {
		return bad
	}
	d := json.NewDecoder(bytes.NewReader(trimmed))
	if strict {
		d.DisallowUnknownFields()
	}
	return d.Decode(v)
}

// fieldNames caches jsonNames by type.
var fieldNames sync.Map // reflect.Type → map[string]bool

// jsonNames are the JSON names of a struct type's fields, as
// encoding/json names them (the tag's name, else the field's).
func jsonNames(t reflect.Type) map[string]bool {
	if m, ok := fieldNames.Load(t); ok {
		return m.(map[string]bool)
	}
	m := map[string]bool{}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch name {
		case "-":
			continue
		case "":
			name = f.Name
		}
		m[name] = true
	}
	fieldNames.Store(t, m)
	return m
}
