package cuda

import (
	"encoding/hex"
	"fmt"
)

// DeviceCount returns the number of CUDA devices visible to the process.
func DeviceCount() (int, error) {
	if err := load(); err != nil {
		return 0, err
	}
	var n int32
	if r := cuDeviceGetCount(ptrOf(&n)); r != Success {
		return 0, newError("cuDeviceGetCount", r, "")
	}
	return int(n), nil
}

// Device is a CUDA device (a CUdevice). It is a small value; copy it freely.
// The zero Device is not valid: get one from GetDevice.
type Device struct {
	handle  int32 // the CUdevice
	ordinal int32
	valid   bool
}

// GetDevice returns the device with the given ordinal (0 <= ordinal <
// DeviceCount()).
func GetDevice(ordinal int) (Device, error) {
	if err := load(); err != nil {
		return Device{}, err
	}
	n, err := DeviceCount()
	if err != nil {
		return Device{}, err
	}
	if ordinal < 0 || ordinal >= n {
		return Device{}, invalid(ErrInvalidDevice, "GetDevice", "ordinal %d out of range [0, %d)", ordinal, n)
	}
	var h int32
	if r := cuDeviceGet(ptrOf(&h), int32(ordinal)); r != Success {
		return Device{}, newError("cuDeviceGet", r, fmt.Sprintf("ordinal=%d", ordinal))
	}
	return Device{handle: h, ordinal: int32(ordinal), valid: true}, nil
}

// Ordinal returns the device's index (what CUDA_VISIBLE_DEVICES renumbers
// and DLPack's device_id means).
func (d Device) Ordinal() int { return int(d.ordinal) }

// Handle returns the raw CUdevice.
func (d Device) Handle() int32 { return d.handle }

func (d Device) String() string {
	if !d.valid {
		return "cuda.Device(invalid)"
	}
	return fmt.Sprintf("cuda:%d", d.ordinal)
}

func (d Device) check(op string) error {
	if !d.valid {
		return errHandle(op, "zero Device: get one from GetDevice")
	}
	return load()
}

// Name returns the device's product name, e.g. "NVIDIA H100 80GB HBM3".
func (d Device) Name() (string, error) {
	if err := d.check("Device.Name"); err != nil {
		return "", err
	}
	buf := make([]byte, 256)
	if r := cuDeviceGetName(ptrOf(&buf[0]), int32(len(buf)), d.handle); r != Success {
		return "", newError("cuDeviceGetName", r, d.String())
	}
	return cString(&buf[0]), nil
}

// ComputeCapability returns the SM version, e.g. (9, 0) for an H100.
func (d Device) ComputeCapability() (major, minor int, err error) {
	if major, err = d.Attribute(AttrComputeCapabilityMajor); err != nil {
		return 0, 0, err
	}
	if minor, err = d.Attribute(AttrComputeCapabilityMinor); err != nil {
		return 0, 0, err
	}
	return major, minor, nil
}

// TotalMem returns the device's memory in bytes.
func (d Device) TotalMem() (uint64, error) {
	if err := d.check("Device.TotalMem"); err != nil {
		return 0, err
	}
	var n uint64
	if r := cuDeviceTotalMem_v2(ptrOf(&n), d.handle); r != Success {
		return 0, newError("cuDeviceTotalMem_v2", r, d.String())
	}
	return n, nil
}

// PCIBusID returns the PCI address as "domain:bus:device.function"
// (e.g. "0000:3B:00.0").
func (d Device) PCIBusID() (string, error) {
	if err := d.check("Device.PCIBusID"); err != nil {
		return "", err
	}
	buf := make([]byte, 64)
	if r := cuDeviceGetPCIBusId(ptrOf(&buf[0]), int32(len(buf)), d.handle); r != Success {
		return "", newError("cuDeviceGetPCIBusId", r, d.String())
	}
	return cString(&buf[0]), nil
}

// UUID is a device's 16-byte identifier.
type UUID [16]byte

// String formats u the way nvidia-smi does: "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx".
func (u UUID) String() string {
	h := hex.EncodeToString(u[:])
	return "GPU-" + h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// UUID returns the device's UUID (cuDeviceGetUuid_v2 where the driver has
// it, else cuDeviceGetUuid).
func (d Device) UUID() (UUID, error) {
	var u UUID
	if err := d.check("Device.UUID"); err != nil {
		return u, err
	}
	if r := cuDeviceGetUuid(ptrOf(&u), d.handle); r != Success {
		return u, newError("cuDeviceGetUuid", r, d.String())
	}
	return u, nil
}

// DeviceAttribute is a CUdevice_attribute. The constants below name the
// ones this package and its users need; any other value from cuda.h works too.
type DeviceAttribute int32

// Device attributes (values from cuda.h).
const (
	AttrMaxThreadsPerBlock         DeviceAttribute = 1
	AttrMaxBlockDimX               DeviceAttribute = 2
	AttrMaxBlockDimY               DeviceAttribute = 3
	AttrMaxBlockDimZ               DeviceAttribute = 4
	AttrMaxGridDimX                DeviceAttribute = 5
	AttrMaxGridDimY                DeviceAttribute = 6
	AttrMaxGridDimZ                DeviceAttribute = 7
	AttrMaxSharedMemoryPerBlock    DeviceAttribute = 8
	AttrWarpSize                   DeviceAttribute = 10
	AttrClockRate                  DeviceAttribute = 13
	AttrMultiprocessorCount        DeviceAttribute = 16
	AttrIntegrated                 DeviceAttribute = 18
	AttrCanMapHostMemory           DeviceAttribute = 19
	AttrPCIBusID                   DeviceAttribute = 33
	AttrPCIDeviceID                DeviceAttribute = 34
	AttrMemoryClockRate            DeviceAttribute = 36
	AttrGlobalMemoryBusWidth       DeviceAttribute = 37
	AttrAsyncEngineCount           DeviceAttribute = 40
	AttrUnifiedAddressing          DeviceAttribute = 41
	AttrPCIDomainID                DeviceAttribute = 50
	AttrComputeCapabilityMajor     DeviceAttribute = 75
	AttrComputeCapabilityMinor     DeviceAttribute = 76
	AttrManagedMemory              DeviceAttribute = 83
	AttrConcurrentManagedAccess    DeviceAttribute = 89
	AttrHostRegisterSupported      DeviceAttribute = 99
	AttrMemoryPoolsSupported       DeviceAttribute = 115
	AttrGPUDirectRDMASupported     DeviceAttribute = 116
	AttrMaxSharedMemoryPerBlockOpt DeviceAttribute = 97
)

// Attribute returns a device attribute (cuDeviceGetAttribute).
func (d Device) Attribute(a DeviceAttribute) (int, error) {
	if err := d.check("Device.Attribute"); err != nil {
		return 0, err
	}
	v, r := cuDeviceGetAttribute(int32(a), d.handle)
	if r != Success {
		return 0, newError("cuDeviceGetAttribute", r, fmt.Sprintf("attr=%d %v", a, d))
	}
	return int(int32(uint32(v))), nil
}

// CanAccessPeer reports whether d can address memory of peer directly
// (cuDeviceCanAccessPeer). Peer copies work either way; this decides
// whether they go over NVLink/PCIe peer-to-peer or through the host.
func (d Device) CanAccessPeer(peer Device) (bool, error) {
	if err := d.check("Device.CanAccessPeer"); err != nil {
		return false, err
	}
	if err := peer.check("Device.CanAccessPeer"); err != nil {
		return false, err
	}
	var v int32
	if r := cuDeviceCanAccessPeer(ptrOf(&v), d.handle, peer.handle); r != Success {
		return false, newError("cuDeviceCanAccessPeer", r, fmt.Sprintf("%v peer=%v", d, peer))
	}
	return v != 0, nil
}
