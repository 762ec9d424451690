package main

import (
	"bufio"
	"cmp"
	"fmt"
	"html"
	"io"
	"math"
	"slices"
	"strings"
)

// Colors of the paths and the baseline in the plot.
var pathColors = map[string]string{
	"pinned":        "#1f77b4",
	"pageable":      "#ff7f0e",
	"staged":        "#2ca02c",
	"registered":    "#d62728",
	"strided":       "#9467bd",
	"cuda-pinned":   "#555555",
	"cuda-pageable": "#aaaaaa",
}

type point struct {
	size int64
	gbps float64
}

type series struct {
	name   string // "staged h2d"
	color  string
	dashed bool // d2h
	thin   bool // the baseline
	pts    []point
}

// writeSVG plots GB/s against size (log scale) for every path and
// direction measured, and the baseline's pinned and pageable curves.
func writeSVG(w io.Writer, title string, paths, dirs []string, rs []result, base *baseline) error {
	var ss []series
	for _, d := range dirs {
		for _, p := range paths {
			s := series{name: p + " " + d, color: pathColors[p], dashed: d == "d2h"}
			for _, r := range rs {
				if r.path == p && r.dir == d {
					s.pts = append(s.pts, point{r.size, r.gbps})
				}
			}
			if len(s.pts) > 0 {
				ss = append(ss, s)
			}
		}
		if base != nil {
			for _, bp := range []string{"pinned", "pageable"} {
				s := series{name: "cudaMemcpy " + bp + " " + d, color: pathColors["cuda-"+bp], dashed: d == "d2h", thin: true}
				for k, g := range base.gbps {
					if k.path == bp && k.dir == d {
						s.pts = append(s.pts, point{k.size, g})
					}
				}
				slices.SortFunc(s.pts, func(a, b point) int { return cmp.Compare(a.size, b.size) })
				if len(s.pts) > 0 {
					ss = append(ss, s)
				}
			}
		}
	}
	return plot(w, title, ss)
}

func plot(out io.Writer, title string, ss []series) error {
	const (
		width, height            = 960, 600
		left, right, top, bottom = 70, 230, 50, 60
		pw, ph                   = width - left - right, height - top - bottom
	)
	minS, maxS := int64(math.MaxInt64), int64(1)
	maxG := 1.0
	for _, s := range ss {
		for _, p := range s.pts {
			minS, maxS = min(minS, p.size), max(maxS, p.size)
			maxG = max(maxG, p.gbps)
		}
	}
	if minS == math.MaxInt64 {
		minS, maxS = 4<<10, 1<<30
	}
	if maxS == minS {
		maxS = minS * 4
	}
	step := niceStep(maxG / 6)
	ymax := math.Ceil(maxG/step) * step
	lx0, lx1 := math.Log2(float64(minS)), math.Log2(float64(maxS))
	x := func(size int64) float64 { return left + (math.Log2(float64(size))-lx0)/(lx1-lx0)*pw }
	y := func(g float64) float64 { return top + ph - g/ymax*ph }

	w := bufio.NewWriter(out)
	fmt.Fprintf(w, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(w, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	fmt.Fprintf(w, `<text x="%d" y="28" font-size="15" font-weight="bold">%s</text>`+"\n", left, html.EscapeString(title))
	// Grid and y axis.
	for g := 0.0; g <= ymax+step/2; g += step {
		fmt.Fprintf(w, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#e0e0e0"/>`+"\n", left, y(g), left+pw, y(g))
		fmt.Fprintf(w, `<text x="%d" y="%.1f" text-anchor="end">%g</text>`+"\n", left-6, y(g)+4, g)
	}
	// x axis: a tick at each power of 4 bytes in range (and the ends).
	for s := int64(1); s <= maxS; s *= 4 {
		if s < minS {
			continue
		}
		fmt.Fprintf(w, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#e0e0e0"/>`+"\n", x(s), top, x(s), top+ph)
		fmt.Fprintf(w, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", x(s), top+ph+18, shortSize(s))
	}
	fmt.Fprintf(w, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="black"/>`+"\n", left, top, pw, ph)
	fmt.Fprintf(w, `<text x="%d" y="%d" text-anchor="middle">transfer size (bytes, log scale)</text>`+"\n", left+pw/2, height-18)
	fmt.Fprintf(w, `<text transform="translate(20 %d) rotate(-90)" text-anchor="middle">GB/s</text>`+"\n", top+ph/2)
	// Curves and legend.
	for i, s := range ss {
		var pts []string
		for _, p := range s.pts {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(p.size), y(p.gbps)))
		}
		sw := 2.0
		if s.thin {
			sw = 1.2
		}
		dash := ""
		if s.dashed {
			dash = ` stroke-dasharray="6 4"`
		}
		fmt.Fprintf(w, `<polyline fill="none" stroke="%s" stroke-width="%.1f"%s points="%s"><title>%s</title></polyline>`+"\n",
			s.color, sw, dash, strings.Join(pts, " "), html.EscapeString(s.name))
		if !s.thin {
			for _, p := range s.pts {
				fmt.Fprintf(w, `<circle cx="%.1f" cy="%.1f" r="2.5" fill="%s"><title>%s %s: %.2f GB/s</title></circle>`+"\n",
					x(p.size), y(p.gbps), s.color, html.EscapeString(s.name), shortSize(p.size), p.gbps)
			}
		}
		ly := float64(top + 10 + 18*i)
		lx := float64(left + pw + 16)
		fmt.Fprintf(w, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="%.1f"%s/>`+"\n", lx, ly, lx+28, ly, s.color, sw, dash)
		fmt.Fprintf(w, `<text x="%.1f" y="%.1f">%s</text>`+"\n", lx+34, ly+4, html.EscapeString(s.name))
	}
	fmt.Fprintln(w, `</svg>`)
	return w.Flush()
}

// niceStep rounds x up to 1, 2 or 5 times a power of ten.
func niceStep(x float64) float64 {
	if x <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(x)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= x {
			return m * p
		}
	}
	return 10 * p
}

// shortSize labels an axis tick: "4K", "16M", "1G".
func shortSize(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dG", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dM", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dK", n>>10)
	}
	return fmt.Sprint(n)
}
