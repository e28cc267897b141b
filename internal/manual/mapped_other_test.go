//go:build !linux

package manual

const mapsHere = false
