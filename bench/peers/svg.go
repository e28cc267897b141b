package main

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// barChart is a grouped bar chart: one group per category (a workload),
// one bar per series (a system) in each group.
type barChart struct {
	Title    string
	Unit     string // the value axis' label
	Log      bool   // logarithmic value axis, for figures spanning decades
	Series   []string
	Category []string
	Values   [][]float64 // [category][series]; NaN: no bar
}

var seriesColors = []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"}

// svg renders the chart as a standalone SVG document.
func (c barChart) svg() string {
	const (
		left, right, top, bottom = 70.0, 20.0, 40.0, 110.0
		barW, gap                = 18.0, 14.0
		plotH                    = 260.0
	)
	groupW := float64(len(c.Series))*barW + gap
	width := left + right + math.Max(float64(len(c.Category))*groupW, 200)
	height := top + plotH + bottom
	lo, hi := math.Inf(1), 0.0
	for _, row := range c.Values {
		for _, v := range row {
			if !math.IsNaN(v) && v > 0 {
				lo, hi = math.Min(lo, v), math.Max(hi, v)
			}
		}
	}
	if hi == 0 {
		lo, hi = 1, 1
	}
	scale := func(v float64) float64 { // 0..1 of the plot height
		if c.Log {
			a, b := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
			if b == a {
				b = a + 1
			}
			return (math.Log10(math.Max(v, math.Pow(10, a))) - a) / (b - a)
		}
		return v / (hi * 1.1)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="11">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%.0f" y="20" font-size="14" font-weight="bold">%s</text>`+"\n", left, html.EscapeString(c.Title))
	fmt.Fprintf(&b, `<text x="14" y="%.0f" transform="rotate(-90 14 %.0f)" text-anchor="middle">%s</text>`+"\n", top+plotH/2, top+plotH/2, html.EscapeString(c.Unit))
	// Axis with a few ticks.
	fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="black"/>`+"\n", left, top, left, top+plotH)
	fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="black"/>`+"\n", left, top+plotH, width-right, top+plotH)
	for _, tick := range c.ticks(lo, hi) {
		y := top + plotH - scale(tick)*plotH
		fmt.Fprintf(&b, `<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#ddd"/>`+"\n", left, y, width-right, y)
		fmt.Fprintf(&b, `<text x="%.0f" y="%.1f" text-anchor="end">%s</text>`+"\n", left-4, y+4, html.EscapeString(shortNum(tick)))
	}
	for i, cat := range c.Category {
		x0 := left + gap/2 + float64(i)*groupW
		for j := range c.Series {
			v := math.NaN()
			if i < len(c.Values) && j < len(c.Values[i]) {
				v = c.Values[i][j]
			}
			if math.IsNaN(v) {
				continue
			}
			h := math.Max(scale(v)*plotH, 0.5)
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.0f" height="%.1f" fill="%s"><title>%s %s: %s</title></rect>`+"\n",
				x0+float64(j)*barW, top+plotH-h, barW-2, h, seriesColors[j%len(seriesColors)],
				html.EscapeString(c.Series[j]), html.EscapeString(cat), html.EscapeString(shortNum(v)))
		}
		cx := x0 + float64(len(c.Series))*barW/2
		fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" text-anchor="end" transform="rotate(-40 %.1f %.0f)">%s</text>`+"\n", cx, top+plotH+14, cx, top+plotH+14, html.EscapeString(cat))
	}
	writeLegend(&b, c.Series, left, 120, height)
	return b.String()
}

// writeLegend writes a chart's legend, one colored box and name per
// series, step apart, along its bottom edge, and ends the document.
func writeLegend(b *strings.Builder, series []string, left, step, height float64) {
	for j, s := range series {
		x := left + float64(j)*step
		fmt.Fprintf(b, `<rect x="%.0f" y="%.0f" width="10" height="10" fill="%s"/><text x="%.0f" y="%.0f">%s</text>`+"\n",
			x, height-18, seriesColors[j%len(seriesColors)], x+14, height-9, html.EscapeString(s))
	}
	b.WriteString("</svg>\n")
}

// ticks are the value axis' gridlines: powers of ten on a log axis, five
// even steps on a linear one.
func (c barChart) ticks(lo, hi float64) []float64 {
	var out []float64
	if c.Log {
		for e := math.Floor(math.Log10(lo)); e <= math.Ceil(math.Log10(hi)); e++ {
			out = append(out, math.Pow(10, e))
		}
		return out
	}
	for i := 0; i <= 5; i++ {
		out = append(out, hi*1.1*float64(i)/5)
	}
	return out
}

// shortNum prints a figure compactly: 1.2k, 3.4M, 0.25.
func shortNum(v float64) string {
	switch a := math.Abs(v); {
	case a >= 1e6:
		return fmt.Sprintf("%.3gM", v/1e6)
	case a >= 1e3:
		return fmt.Sprintf("%.3gk", v/1e3)
	case a >= 1 || a == 0:
		return fmt.Sprintf("%.3g", v)
	}
	return fmt.Sprintf("%.2g", v)
}

// lineChart is a chart of series of (x, y) points on linear axes.
type lineChart struct {
	Title, XUnit, YUnit string
	Series              []string
	Points              [][][2]float64 // [series][point]{x, y}
}

// svg renders the chart as a standalone SVG document.
func (c lineChart) svg() string {
	const (
		left, right, top, bottom = 70.0, 20.0, 40.0, 60.0
		plotW, plotH             = 640.0, 260.0
	)
	width, height := left+plotW+right, top+plotH+bottom
	xmax, ymax := 0.0, 0.0
	for _, pts := range c.Points {
		for _, pt := range pts {
			xmax, ymax = math.Max(xmax, pt[0]), math.Max(ymax, pt[1])
		}
	}
	xmax, ymax = math.Max(xmax, 1), math.Max(ymax*1.1, 1)
	x := func(v float64) float64 { return left + v/xmax*plotW }
	y := func(v float64) float64 { return top + plotH - v/ymax*plotH }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="11">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%.0f" y="20" font-size="14" font-weight="bold">%s</text>`+"\n", left, html.EscapeString(c.Title))
	fmt.Fprintf(&b, `<text x="14" y="%.0f" transform="rotate(-90 14 %.0f)" text-anchor="middle">%s</text>`+"\n", top+plotH/2, top+plotH/2, html.EscapeString(c.YUnit))
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="middle">%s</text>`+"\n", left+plotW/2, top+plotH+32, html.EscapeString(c.XUnit))
	for i := 0; i <= 5; i++ {
		yv, xv := ymax*float64(i)/5, xmax*float64(i)/5
		fmt.Fprintf(&b, `<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#ddd"/>`+"\n", left, y(yv), left+plotW, y(yv))
		fmt.Fprintf(&b, `<text x="%.0f" y="%.1f" text-anchor="end">%s</text>`+"\n", left-4, y(yv)+4, html.EscapeString(shortNum(yv)))
		fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" text-anchor="middle">%s</text>`+"\n", x(xv), top+plotH+16, html.EscapeString(shortNum(xv)))
	}
	fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="black"/>`+"\n", left, top, left, top+plotH)
	fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="black"/>`+"\n", left, top+plotH, left+plotW, top+plotH)
	for j, pts := range c.Points {
		var path []string
		for _, pt := range pts {
			path = append(path, fmt.Sprintf("%.1f,%.1f", x(pt[0]), y(pt[1])))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`+"\n", seriesColors[j%len(seriesColors)], strings.Join(path, " "))
	}
	writeLegend(&b, c.Series, left, 160, height)
	return b.String()
}
