// Command fake-gpu-plugin is a kubelet device plugin for the test node: it
// advertises -count fake devices of -resource (default 4 nvidia.com/gpu), so
// GPU requests schedule, count against quotas and stay Pending when too many
// are asked for, on a machine without GPUs. Like NVIDIA's device plugin, its
// Allocate hands the container NVIDIA_VISIBLE_DEVICES with the IDs of the
// devices it was given; no device node is mounted (there is none).
//
// It speaks the kubelet's device-plugin API (k8s.io/kubelet deviceplugin
// v1beta1): it serves DevicePlugin on a socket in -plugin-dir and registers
// there with kubelet.sock. The kubelet removes every socket in that directory
// when it restarts; the plugin then serves and registers again.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

type plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	devices []*pluginapi.Device
}

func (p *plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

// ListAndWatch sends the device list once; the devices never change health.
func (p *plugin) ListAndWatch(_ *pluginapi.Empty, stream pluginapi.DevicePlugin_ListAndWatchServer) error {
	if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: p.devices}); err != nil {
		return err
	}
	<-stream.Context().Done()
	return nil
}

func (p *plugin) GetPreferredAllocation(context.Context, *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	return &pluginapi.PreferredAllocationResponse{}, nil
}

// Allocate gives each container NVIDIA_VISIBLE_DEVICES: the comma-separated
// IDs the kubelet allocated to it, as NVIDIA's plugin does with its
// envvar device-list strategy.
func (p *plugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, c := range req.ContainerRequests {
		log.Printf("allocate %s", strings.Join(c.DevicesIds, ","))
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{
			Envs: map[string]string{"NVIDIA_VISIBLE_DEVICES": strings.Join(c.DevicesIds, ",")},
		})
	}
	return resp, nil
}

func (p *plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

// serve listens on socket, registers with the kubelet and returns the server
// once the kubelet accepted the registration.
func serve(p *plugin, dir, socket, resource string) (*grpc.Server, error) {
	path := filepath.Join(dir, socket)
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	listener, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	server := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(server, p)
	go func() { _ = server.Serve(listener) }()

	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, "kubelet.sock"),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		server.Stop()
		return nil, err
	}
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     socket,
		ResourceName: resource,
		Options:      &pluginapi.DevicePluginOptions{},
	})
	if err != nil {
		server.Stop()
		return nil, fmt.Errorf("registering with the kubelet: %w", err)
	}
	return server, nil
}

func main() {
	dir := flag.String("plugin-dir", pluginapi.DevicePluginPath, "the kubelet's device-plugin directory (kubelet.sock)")
	resource := flag.String("resource", "nvidia.com/gpu", "extended resource name to advertise")
	count := flag.Int("count", 4, "number of fake devices")
	flag.Parse()
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)

	p := &plugin{}
	for i := range *count {
		p.devices = append(p.devices, &pluginapi.Device{ID: fmt.Sprintf("fake-gpu-%d", i), Health: pluginapi.Healthy})
	}
	socket := "errand-fake-gpu.sock"
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)

	var server *grpc.Server
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		// (Re)register whenever our socket is gone: at start, and after the
		// kubelet restarted and cleared the directory.
		if _, err := os.Stat(filepath.Join(*dir, socket)); server == nil || err != nil {
			if server != nil {
				server.Stop()
				server = nil
			}
			s, err := serve(p, *dir, socket, *resource)
			if err != nil {
				log.Printf("not registered yet: %v", err)
			} else {
				server = s
				log.Printf("registered %d x %s with the kubelet (%s)", *count, *resource, filepath.Join(*dir, socket))
			}
		}
		select {
		case <-stop:
			if server != nil {
				server.Stop()
			}
			_ = os.Remove(filepath.Join(*dir, socket))
			return
		case <-tick.C:
		}
	}
}
