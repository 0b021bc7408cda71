package rag

import (
	"fmt"
	"sort"
)

// Index is an in-memory vector index of the corpus, built once with one embedding model.
type Index struct {
	// Version names the index build, e.g. "corpus-2026-11@hash-embed-v1".
	Version string
	// EmbeddingModel is the version of the model the passages were embedded with.
	EmbeddingModel string
	passages       []Passage
	vectors        [][]float64
}

// BuildIndex embeds every passage with emb.
func BuildIndex(passages []Passage, emb HashEmbedder, corpusVersion string) *Index {
	ix := &Index{
		Version:        fmt.Sprintf("%s@%s", corpusVersion, emb.Version),
		EmbeddingModel: emb.Version,
		passages:       passages,
	}
	for _, p := range passages {
		ix.vectors = append(ix.vectors, emb.Embed(p.Title+". "+p.Text))
	}
	return ix
}

// Hit is one retrieved passage and its cosine similarity to the query.
type Hit struct {
	Passage Passage
	Score   float64
}

// Search returns the k passages most similar to the query vector, best first.
func (ix *Index) Search(query []float64, k int) []Hit {
	hits := make([]Hit, len(ix.passages))
	for i, p := range ix.passages {
		hits[i] = Hit{Passage: p, Score: Cosine(query, ix.vectors[i])}
	}
	sort.SliceStable(hits, func(i, j int) bool { return hits[i].Score > hits[j].Score })
	if k < len(hits) {
		hits = hits[:k]
	}
	return hits
}
