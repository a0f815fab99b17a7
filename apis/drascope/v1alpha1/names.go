package v1alpha1

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// hashLength is how many hex digits of sha256(driver, pool) a hashed name
// ends with: 64 bits, so two pools of one cluster never meet by chance.
const hashLength = 16

// PlainName is the readable object name of a pool, "<driver>.<pool>" with
// each "/" of the pool name replaced by "-", and whether it is a valid
// object name. Plain names of two pools can collide ("a.b"+"c" and "a"+"b.c",
// or pools "x/y" and "x-y"); the publisher uses HashedName for the second.
func PlainName(driver, pool string) (string, bool) {
	name := driver + "." + strings.ReplaceAll(pool, "/", "-")
	return name, len(validation.IsDNS1123Subdomain(name)) == 0
}

// HashedName is the fallback object name of a pool: a prefix of its plain
// name and a hash of driver and pool, always valid and never longer than 253
// characters.
func HashedName(driver, pool string) string {
	sum := sha256.Sum256([]byte(driver + "\x00" + pool))
	suffix := hex.EncodeToString(sum[:])[:hashLength]
	plain, _ := PlainName(driver, pool)
	prefix := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, strings.ToLower(plain))
	prefix = prefix[:min(len(prefix), validation.DNS1123SubdomainMaxLength-hashLength-1)]
	// One label of [a-z0-9-]: it must start and end with an alphanumeric.
	prefix = strings.Trim(prefix, "-")
	if prefix == "" {
		return "pool-" + suffix
	}
	return prefix + "-" + suffix
}
