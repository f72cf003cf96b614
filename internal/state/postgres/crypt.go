package postgres

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"fmt"

	"golang.org/x/crypto/argon2"
)

// Secrets are sealed with AES-256-GCM under a key derived from the state
// passphrase with Argon2id (RFC 9106's second recommended setting: 64 MiB,
// 3 passes) and a random salt kept in the store, so every instance that
// shares the store and the passphrase derives the same key. Each sealed
// value is nonce || ciphertext, authenticated with its tenant and kind, so
// a value moved to another row does not open.

const (
	kdfTime    = 3
	kdfMemory  = 64 << 10 // KiB
	kdfThreads = 4
	keyLen     = 32
	saltLen    = 16
)

// verifierText is sealed at creation so a wrong passphrase is told apart
// from a damaged secret.
const verifierText = "rezuscloud state store"

type sealer struct{ aead cipher.AEAD }

func newSealer(passphrase string, salt []byte) (*sealer, error) {
	if passphrase == "" {
		return nil, errors.New("no state passphrase")
	}
	key := argon2.IDKey([]byte(passphrase), salt, kdfTime, kdfMemory, kdfThreads, keyLen)
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &sealer{aead: aead}, nil
}

func newSalt() ([]byte, error) {
	salt := make([]byte, saltLen)
	if _, err := rand.Read(salt); err != nil {
		return nil, fmt.Errorf("salt: %w", err)
	}
	return salt, nil
}

func (s *sealer) seal(plain []byte, context string) ([]byte, error) {
	nonce := make([]byte, s.aead.NonceSize(), s.aead.NonceSize()+len(plain)+s.aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("nonce: %w", err)
	}
	return s.aead.Seal(nonce, nonce, plain, []byte(context)), nil
}

func (s *sealer) open(sealed []byte, context string) ([]byte, error) {
	n := s.aead.NonceSize()
	if len(sealed) < n+s.aead.Overhead() {
		return nil, errors.New("sealed value too short")
	}
	return s.aead.Open(nil, sealed[:n], sealed[n:], []byte(context))
}
