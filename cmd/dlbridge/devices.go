package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/dlbridge/dlbridge/cuda"
)

// devices prints the driver and its devices, or one line saying there is
// no driver (exit status 0: having no GPU is an answer, not a failure).
func devices(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("devices", flag.ContinueOnError)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if err := cuda.Init(); err != nil {
		fmt.Fprintf(stdout, "no CUDA driver present: %s\n", noDriverReason(err))
		return 0
	}
	ver, err := cuda.DriverVersion()
	if err != nil {
		fmt.Fprintf(stderr, "dlbridge: %v\n", err)
		return 1
	}
	n, err := cuda.DeviceCount()
	if err != nil {
		fmt.Fprintf(stderr, "dlbridge: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "driver: CUDA %d.%d (%s), %d device(s)\n", ver/1000, ver%1000/10, cuda.LibraryPath(), n)
	status := 0
	for i := range n {
		if err := describeDevice(stdout, i); err != nil {
			fmt.Fprintf(stderr, "dlbridge: device %d: %v\n", i, err)
			status = 1
		}
	}
	return status
}

// noDriverReason is why there is no driver, without ErrNoDriver's own
// words (the line already says so).
func noDriverReason(err error) string {
	msg := err.Error()
	if errors.Is(err, cuda.ErrNoDriver) {
		msg = strings.TrimPrefix(msg, cuda.ErrNoDriver.Error()+": ")
	}
	return msg
}

func describeDevice(w io.Writer, i int) error {
	d, err := cuda.GetDevice(i)
	if err != nil {
		return err
	}
	name, err := d.Name()
	if err != nil {
		return err
	}
	major, minor, err := d.ComputeCapability()
	if err != nil {
		return err
	}
	mem, err := d.TotalMem()
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "cuda:%d  %s  sm_%d%d  %s\n", i, name, major, minor, humanBytes(int64(mem)))
	if bus, err := d.PCIBusID(); err == nil {
		fmt.Fprintf(w, "        pci %s", bus)
	}
	if u, err := d.UUID(); err == nil {
		fmt.Fprintf(w, "  %v", u)
	}
	fmt.Fprintln(w)
	attrs := []struct {
		name string
		a    cuda.DeviceAttribute
	}{
		{"SMs", cuda.AttrMultiprocessorCount},
		{"copy engines", cuda.AttrAsyncEngineCount},
		{"unified addressing", cuda.AttrUnifiedAddressing},
		{"managed memory", cuda.AttrManagedMemory},
		{"host register", cuda.AttrHostRegisterSupported},
		{"memory pools", cuda.AttrMemoryPoolsSupported},
	}
	fmt.Fprint(w, "       ")
	for _, a := range attrs {
		if v, err := d.Attribute(a.a); err == nil {
			fmt.Fprintf(w, " %s=%d", a.name, v)
		}
	}
	fmt.Fprintln(w)
	return nil
}

// humanBytes writes n in binary units: "80 GiB", "4 KiB", "1.5 MiB".
func humanBytes(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	f := float64(n)
	u := 0
	for f >= 1024 && u < len(units)-1 {
		f /= 1024
		u++
	}
	if f == float64(int64(f)) {
		return fmt.Sprintf("%d %s", int64(f), units[u])
	}
	return fmt.Sprintf("%.1f %s", f, units[u])
}
