package tokens_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/mcpp/gateway/tokens"
	"github.com/mcpp/gateway/wire"
)

// A gateway that trusts the HS256 tokens of one secret: a token joins
// the pods of its pods claim, as the participant of its sub, and is
// refused, naming the claim, where it may not.
func Example() {
	dir, err := os.MkdirTemp("", "tokens-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	secret := []byte("an-example-secret-of-32-bytes-at-least")
	secretFile := filepath.Join(dir, "jwt.secret")
	if err := os.WriteFile(secretFile, append(secret, '\n'), 0o600); err != nil {
		log.Fatal(err)
	}

	ctx := context.Background()
	v, err := tokens.New(ctx, tokens.Config{
		JWTSecretFile:       secretFile,
		Issuer:              "https://idp.example/",
		DefaultCapabilities: wire.Kinds("chat"),
	})
	if err != nil {
		log.Fatal(err)
	}

	// What the identity provider hands alice.
	token, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"sub":  "alice",
		"iss":  "https://idp.example/",
		"pods": []string{"lab-*"},
		"exp":  time.Now().Add(time.Hour).Unix(),
	}).SignedString(secret)
	if err != nil {
		log.Fatal(err)
	}

	id, refusal := v.Verify(ctx, token, "lab-1")
	fmt.Println(id.Participant, id.Pods, id.Capabilities[0].Kind, refusal == nil)

	_, refusal = v.Verify(ctx, token, "prod")
	fmt.Println(refusal.Status, refusal.Code, refusal.Message)

	expired, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"sub": "alice",
		"iss": "https://idp.example/",
		"exp": time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).Unix(),
	}).SignedString(secret)
	if err != nil {
		log.Fatal(err)
	}
	_, refusal = v.Verify(ctx, expired, "lab-1")
	fmt.Println(refusal.Status, refusal.Code, refusal.Message)
	// Output:
	// alice [lab-*] chat true
	// 403 forbidden pods: this token may not join pod "prod"
	// 401 unauthorized exp: the token expired at 2025-01-01T00:00:00Z
}
