package cloud

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/kubefence/kubefence/pkg/plugin"
)

// Test credentials. moto accepts any; they only need the right shape.
const (
	testAccessKeyID     = "AKIAMOTOTESTKEY00001"
	testSecretAccessKey = "motoTestSecret/K7MDENGbPxRfiCYEXAMPLEKEY"
)

// motoProc is the one moto_server of this test binary, started on first use and
// stopped by TestMain.
var motoProc struct {
	once sync.Once
	cmd  *exec.Cmd
	url  string
	log  bytes.Buffer
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	stopMoto()
	os.Exit(code)
}

// moto returns the URL of a running moto_server with its state reset.
func moto(tb testing.TB) string {
	tb.Helper()
	motoProc.once.Do(func() { motoProc.err = startMoto() })
	if motoProc.err != nil {
		tb.Fatalf("moto: %v", motoProc.err)
	}
	resp, err := http.Post(motoProc.url+"/moto-api/reset", "application/json", nil)
	if err != nil {
		tb.Fatalf("reset moto: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		tb.Fatalf("reset moto: %s", resp.Status)
	}
	return motoProc.url
}

func startMoto() error {
	bin, err := exec.LookPath("moto_server")
	if err != nil {
		bin = "/root/.pyenv/shims/moto_server"
		if _, serr := os.Stat(bin); serr != nil {
			return fmt.Errorf("moto_server not found (%v); install it with: pip install 'moto[server]'", err)
		}
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, "-H", "127.0.0.1", "-p", strconv.Itoa(port))
	// Its own process group, so that stopping it also stops the pyenv shim's children.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stdout, cmd.Stderr = &motoProc.log, &motoProc.log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", bin, err)
	}
	motoProc.cmd = cmd
	motoProc.url = fmt.Sprintf("http://127.0.0.1:%d", port)
	deadline := time.After(60 * time.Second)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for ready := false; !ready; {
		select {
		case <-deadline:
			stopMoto()
			return fmt.Errorf("moto_server on port %d not ready within 60s; output:\n%s", port, motoProc.log.String())
		case <-tick.C:
			resp, err := http.Get(motoProc.url + "/moto-api/data.json")
			if err == nil {
				resp.Body.Close()
				ready = true
			}
		}
	}
	return nil
}

func stopMoto() {
	cmd := motoProc.cmd
	if cmd == nil {
		return
	}
	motoProc.cmd = nil
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// ec2Client is the test's own client, independent of the agent.
func ec2Client(url, region string) *ec2.Client {
	return ec2.NewFromConfig(aws.Config{
		Region:      region,
		Credentials: credentials.NewStaticCredentialsProvider(testAccessKeyID, testSecretAccessKey, ""),
	}, func(o *ec2.Options) { o.BaseEndpoint = aws.String(url) })
}

// amis caches one of moto's default AMIs per region; a reset keeps them.
var amis sync.Map

// runInstance starts one instance in moto with one of moto's default AMIs.
func runInstance(tb testing.TB, c *ec2.Client) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	region := c.Options().Region
	ami, ok := amis.Load(region)
	if !ok {
		imgs, err := c.DescribeImages(ctx, &ec2.DescribeImagesInput{})
		if err != nil || len(imgs.Images) == 0 {
			tb.Fatalf("describe moto's images in %s: %v", region, err)
		}
		ami = aws.ToString(imgs.Images[0].ImageId)
		amis.Store(region, ami)
	}
	out, err := c.RunInstances(ctx, &ec2.RunInstancesInput{
		ImageId:      aws.String(ami.(string)),
		InstanceType: types.InstanceTypeT3Micro,
		MinCount:     aws.Int32(1),
		MaxCount:     aws.Int32(1),
	})
	if err != nil {
		tb.Fatalf("run instance: %v", err)
	}
	return aws.ToString(out.Instances[0].InstanceId)
}

// observe reads the instance state from moto with the test's own client.
func observe(tb testing.TB, c *ec2.Client, id string) types.InstanceStateName {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
	if err != nil {
		tb.Fatalf("describe %s: %v", id, err)
	}
	return out.Reservations[0].Instances[0].State.Name
}

func mustDo(tb testing.TB, what string, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatalf("%s: %v", what, err)
	}
}

// awsRequest addresses instance id in zone through moto with static test keys.
func awsRequest(url, zone, id string) plugin.Request {
	return plugin.Request{
		Node:   "node-" + id,
		Target: fmt.Sprintf("aws:///%s/%s", zone, id),
		Params: map[string]string{ParamEndpoint: url, ParamPollInterval: "50ms", ParamVerifyTimeout: "10s"},
		Secrets: map[string]string{
			SecretAccessKeyID:     testAccessKeyID,
			SecretSecretAccessKey: testSecretAccessKey,
		},
	}
}

// testAgent never reaches for the environment: no default chain, no metadata service.
func testAgent(opts ...Option) *Agent {
	base := []Option{
		WithDefaultCredentials(func(context.Context, string) (aws.CredentialsProvider, error) {
			return nil, fmt.Errorf("default chain disabled in tests")
		}),
		WithSelf(func(context.Context) (string, error) {
			return "", fmt.Errorf("metadata service disabled in tests")
		}),
	}
	return New(append(base, opts...)...)
}
