// Package fuzz holds the fuzz targets for every parser and on-disk format.
package fuzz
