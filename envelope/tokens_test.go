package envelope

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// tokenSamples are envelopes of the kinds a pod carries. tokenCounts are
// their counts by cl100k_base and o200k_base (tiktoken-go/tokenizer
// v0.10.0), which the gateway does not link.
func tokenSamples() []string {
	r := rand.New(rand.NewPCG(1, 2))
	blob := make([]byte, 600)
	for i := range blob {
		blob[i] = byte(r.Uint32())
	}
	const head = `{"protocol":"mcpp/v0.1","id":"7f1c2a9e-4b3d-4e8a-9c61-0d2e5f3a8b17","ts":"2026-11-22T10:00:04.069Z","from":"alice",`
	const code = `package history\n\nimport (\n\t\"encoding/json\"\n\n\t\"github.com/tidwall/gjson\"\n)\n\n// Collapse returns a consumed transient envelope as history replays it.\nfunc Collapse(body []byte, consumedBy string) []byte {\n\tsummary := gjson.GetBytes(body, \"lifecycle.summary\")\n\tby, _ := json.Marshal(consumedBy)\n\trepl := make([]byte, 0, 64+len(summary.Raw)+len(by))\n\trepl = append(repl, ` + "`" + `{\"collapsed\":true,\"summary\":` + "`" + `...)\n\tif summary.Type == gjson.String {\n\t\trepl = append(repl, summary.Raw...)\n\t}\n\treturn repl\n}\n`
	return []string{
		head + `"kind":"chat","payload":{"text":"Could you check whether the deploy finished? The dashboard still shows the old version."}}`,
		head + `"kind":"reasoning/thought","context":{"id":"reason-789","type":"reasoning","parent":"task-1"},"payload":{"step":3,"thought":"The replay must end exactly where live delivery begins, so the join waits until every envelope the node accepted is in its members' queues before it reads the index."}}`,
		head + `"kind":"mcp/request:tools/call","to":["tool:search"],"payload":{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"name":"grep","arguments":{"pattern":"EstimateTokens","path":"/home/alice/src/gateway","limit":20}}}}`,
		head + `"kind":"mcp/response:tools/call","correlation_id":"c4a1","payload":{"jsonrpc":"2.0","id":42,"result":{"content":[{"type":"text","text":"[{\"_id\":\"55d2fc86da7c3f96f90aa005\",\"age\":20,\"name\":\"Luann Grant\",\"email\":\"luanngrant@zogak.com\",\"phone\":\"+1 (915) 479-2908\"},{\"_id\":\"55d2fc8653953bc9a0958a92\",\"age\":34,\"name\":\"Sanders Gonzalez\",\"email\":\"sandersgonzalez@pivitol.com\",\"phone\":\"+1 (914) 563-2007\"}]"}]}}}`,
		head + `"kind":"mcp/response:tools/call","payload":{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"` + code + `"}]}}}`,
		head + `"kind":"artifact/image","payload":{"type":"image","mimeType":"image/png","data":"` + base64.StdEncoding.EncodeToString(blob) + `"}}`,
		head + `"kind":"chat","payload":{"text":"Python（派森）语言是一种功能强大而完善的通用型计算机程序设计语言，已经具有十多年的发展历史，成熟且稳定。"}}`,
		head + `"kind":"chat","payload":{"text":"Установлен: 1.2.3. Кандидат: 1.2.4. Обычных пакетов: 1520. Смешанных виртуальных пакетов: 12."}}`,
		head + `"kind":"chat","payload":{"text":"\u4e2d\u6587\u306e\u30c6\u30ad\u30b9\u30c8\u3002\u042d\u0442\u043e \u0442\u0435\u043a\u0441\u0442."}}`,
		head + `"kind":"tool/result","payload":{"series":[48213,9921,77410,3021,65535,12,90876,44021,31337,27182,81828,45904,52353,60287,47135,26624],"unit":"ms"}}`,
		`{"protocol":"mcpp/v0.1","id":"1223972f-d99e-483c-8939-dfb8f2c92a74","ts":"2026-11-22T10:00:04.069Z","from":"system:gateway","kind":"system/context","context":{"id":"reason-789","type":"reasoning","parent":"ctx-123"},"payload":{"event":"concluded","reason":"conclusion","stats":{"messages":12,"bytes":5230,"participants":["alice","bob"],"depth":2,"created":"2026-11-22T09:58:01.250Z","last_activity":"2026-11-22T10:00:04.069Z","concluded":"2026-11-22T10:00:04.069Z","tokens":1730,"tokens_folded":1650,"tokens_saved":1610}}}`,
	}
}

var tokenCounts = []struct{ cl100k, o200k int }{
	{94, 94}, {136, 137}, {132, 133}, {225, 229}, {263, 269}, {662, 627},
	{134, 113}, {132, 121}, {134, 134}, {129, 129}, {190, 193},
}

// TestEstimateTokensNearTokenizers: on each kind of envelope the estimate
// is within 8% of cl100k_base's count, and within 20% of o200k_base's
// (whose vocabulary spends fewer tokens on some languages).
func TestEstimateTokensNearTokenizers(t *testing.T) {
	samples := tokenSamples()
	if len(samples) != len(tokenCounts) {
		t.Fatalf("%d samples, %d counts", len(samples), len(tokenCounts))
	}
	for i, s := range samples {
		got := EstimateTokens([]byte(s))
		c := tokenCounts[i]
		if r := float64(got) / float64(c.cl100k); r < 0.92 || r > 1.08 {
			t.Errorf("sample %d (%.60s…): %d tokens, cl100k_base counts %d (%.2f)", i, s[120:], got, c.cl100k, r)
		}
		if r := float64(got) / float64(c.o200k); r < 0.8 || r > 1.2 {
			t.Errorf("sample %d (%.60s…): %d tokens, o200k_base counts %d (%.2f)", i, s[120:], got, c.o200k, r)
		}
	}
}

// TestEstimateTokensBounds: 0 for nothing, at least 1, at least one for 8
// bytes and at most one a byte, whatever the bytes.
func TestEstimateTokensBounds(t *testing.T) {
	if n := EstimateTokens(nil); n != 0 {
		t.Fatalf("nothing: %d tokens", n)
	}
	r := rand.New(rand.NewPCG(3, 4))
	inputs := [][]byte{[]byte("{"), []byte("{}"), []byte(" "), bytes.Repeat([]byte("a"), 4000),
		bytes.Repeat([]byte(" "), 4000), bytes.Repeat([]byte(`"\\`), 1000), []byte(strings.Repeat("😀", 500))}
	for range 200 {
		b := make([]byte, 1+r.IntN(600))
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		inputs = append(inputs, b)
	}
	for _, b := range inputs {
		n := EstimateTokens(b)
		if n < 1 || n < len(b)/8 || n > len(b) {
			t.Fatalf("%d bytes (%.20q…): %d tokens, want within [max(1, %d), %d]", len(b), b, n, len(b)/8, len(b))
		}
	}
	// A long run of one letter: real encoders give it a token for 8 bytes.
	if n := EstimateTokens(bytes.Repeat([]byte("a"), 4000)); n != 500 {
		t.Fatalf("4000 a's: %d tokens, want 500", n)
	}
}

// TestTokenWeightAdds: the weights of consecutive pieces add up to the
// weight of the whole, each piece weighed after the byte before it.
func TestTokenWeightAdds(t *testing.T) {
	for _, s := range tokenSamples() {
		b := []byte(s)
		for _, cut := range []int{1, 17, len(b) / 2, len(b) - 1} {
			if got, want := TokenWeight(b[:cut], ' ')+TokenWeight(b[cut:], b[cut-1]), TokenWeight(b, ' '); got != want {
				t.Fatalf("cut at %d: %d + … = %d, whole %d", cut, TokenWeight(b[:cut], ' '), got, want)
			}
		}
		if got, want := TokensOf(TokenWeight(b, ' '), len(b)), EstimateTokens(b); got != want {
			t.Fatalf("TokensOf %d, EstimateTokens %d", got, want)
		}
	}
}

// TestEstimateTokensOverBytesOver4: the rule of thumb bytes/4 counts too
// few for an envelope's JSON; the estimate does not.
func TestEstimateTokensOverBytesOver4(t *testing.T) {
	var est, quarter, cl int
	for i, s := range tokenSamples() {
		est += EstimateTokens([]byte(s))
		quarter += (len(s) + 3) / 4
		cl += tokenCounts[i].cl100k
	}
	if float64(quarter) > 0.75*float64(cl) || est < cl*95/100 || est > cl*105/100 {
		t.Fatalf("cl100k_base %d tokens in all, the estimate %d, bytes/4 %d", cl, est, quarter)
	}
}

// BenchmarkEstimateTokens: what the estimate costs an envelope of 256
// bytes and of 4 KiB (compare BenchmarkParse).
func BenchmarkEstimateTokens(b *testing.B) {
	all := []byte(strings.Join(tokenSamples(), " "))
	for _, size := range []int{256, 4096} {
		env := bytes.Repeat(all, 1+size/len(all))[:size]
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				EstimateTokens(env)
			}
		})
	}
}
