package rag

import (
	"hash/fnv"
	"math"
	"math/rand/v2"
	"strings"
	"unicode"
)

// HashEmbedder is the demo's deterministic embedding model: signed feature hashing of a text's
// lower-cased content words and word pairs into Dim dimensions, L2-normalised.
//
// Like real sentence-embedding models, whose vectors share a common direction (any two texts
// score well above zero), every embedding is the mix sqrt(Shared)·c + sqrt(1−Shared)·f of a
// version-specific common unit vector c and the normalised hashed features f: related texts of
// one version score about Shared + (1−Shared)·overlap (≈0.88 for a question and its passage),
// unrelated ones about Shared.
//
// The hash and c are seeded with the model version, so two versions map the same text into unrelated
// spaces: a query embedded with one version against an index built with another scores near zero
// against every passage, which is exactly the failure of an embedding-model upgrade that forgot to
// re-index (measured on a real service: the top score fell from 0.878 to 0.120 with no error
// anywhere; docs/measurements.md).
type HashEmbedder struct {
	// Version names the embedding model, e.g. "hash-embed-v1".
	Version string
	// Dim is the vector size.
	Dim int
}

// shared is the squared weight of the version's common direction in every embedding.
const shared = 0.55

// stopwords carry no topic and would make unrelated texts similar.
var stopwords = map[string]bool{
	"a": true, "an": true, "the": true, "and": true, "or": true, "of": true, "to": true, "in": true, "on": true,
	"is": true, "are": true, "be": true, "by": true, "for": true, "at": true, "it": true, "its": true, "that": true,
	"this": true, "with": true, "as": true, "from": true, "so": true, "does": true, "do": true, "what": true,
	"why": true, "how": true, "when": true, "while": true, "their": true, "there": true, "than": true, "then": true,
	"every": true, "all": true, "no": true, "not": true, "one": true, "same": true, "rather": true, "therefore": true,
	"you": true, "your": true, "which": true, "has": true, "have": true, "each": true, "both": true, "at once": true,
}

// Words returns the content words of s in order.
func Words(s string) []string {
	fields := strings.FieldsFunc(strings.ToLower(s), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '_'
	})
	out := fields[:0]
	for _, w := range fields {
		if !stopwords[w] {
			out = append(out, w)
		}
	}
	return out
}

// Embed returns the L2-normalised embedding of text.
func (e HashEmbedder) Embed(text string) []float64 {
	v := make([]float64, e.Dim)
	words := Words(text)
	add := func(feature string, weight float64) {
		h := fnv.New64a()
		h.Write([]byte(e.Version))
		h.Write([]byte{0})
		h.Write([]byte(feature))
		sum := h.Sum64()
		sign := 1.0
		if sum>>63 == 1 {
			sign = -1
		}
		v[int(sum%uint64(e.Dim))] += sign * weight
	}
	for i, w := range words {
		add(w, 1)
		if i > 0 {
			add(words[i-1]+" "+w, 0.25)
		}
	}
	normalize(v)
	c := e.common()
	a, b := math.Sqrt(shared), math.Sqrt(1-shared)
	for i := range v {
		v[i] = a*c[i] + b*v[i]
	}
	normalize(v)
	return v
}

// common returns the version's common direction: a unit vector drawn from a generator seeded by
// the version, so it is the same on every run and unrelated between versions.
func (e HashEmbedder) common() []float64 {
	h := fnv.New64a()
	h.Write([]byte("common\x00" + e.Version))
	rng := rand.New(rand.NewPCG(h.Sum64(), 0x5e7e5c09e))
	c := make([]float64, e.Dim)
	for i := range c {
		c[i] = rng.NormFloat64()
	}
	normalize(c)
	return c
}

func normalize(v []float64) {
	var norm float64
	for _, x := range v {
		norm += x * x
	}
	if norm == 0 {
		return
	}
	norm = math.Sqrt(norm)
	for i := range v {
		v[i] /= norm
	}
}

// Cosine returns the cosine similarity of two L2-normalised vectors of the same size.
func Cosine(a, b []float64) float64 {
	var s float64
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}
