package realnode

import (
	"bufio"
	"strings"
	"testing"
	"time"
)

// Lines of node-3's kubelet in a benchmark run on 2026-11-28 (the UIDs shortened): the
// replacement web-0 reached it, the node authorizer refused it the claim, its pod worker
// backed off, and it verified the attached volume 20 s later. An earlier web-0 (other
// UID) and the status manager's refused read, which holds nothing back, come before.
const refusedLog = `I1128 13:20:10.100000      31 reconciler_common.go:251] "operationExecutor.VerifyControllerAttachedVolume started for volume \"web-data\" (UniqueName: \"kubernetes.io/csi/attach.kubefence.test^web-data\") pod \"web-0\" (UID: \"0000\") " pod="default/web-0"
E1128 13:20:16.894938      31 desired_state_of_world_populator.go:302] "Error processing volume" err="error processing PVC default/data-web-0: failed to fetch PVC from API server: persistentvolumeclaims \"data-web-0\" is forbidden: User \"system:node:node-3\" cannot get resource \"persistentvolumeclaims\" in API group \"\" in the namespace \"default\": no relationship found between node 'node-3' and this object" pod="default/web-0" volumeName="data"
E1128 13:20:16.895053      31 status_manager.go:1164] "Failed to get status for pod" err="pods \"web-0\" is forbidden: User \"system:node:node-3\" cannot get resource \"pods\" in API group \"\" in the namespace \"default\": no relationship found between node 'node-3' and this object" podUID="2103" pod="default/web-0"
I1128 13:20:16.930713      31 reconciler_common.go:251] "operationExecutor.VerifyControllerAttachedVolume started for volume \"kube-api-access-b5r6m\" (UniqueName: \"kubernetes.io/projected/2103-kube-api-access-b5r6m\") pod \"web-0\" (UID: \"2103\") " pod="default/web-0"
E1128 13:20:17.195361      31 pod_workers.go:1338] "Error syncing pod, skipping" err="unmounted volumes=[data], unattached volumes=[], failed to process volumes=[data]: error processing PVC default/data-web-0: failed to fetch PVC from API server: persistentvolumeclaims \"data-web-0\" is forbidden: User \"system:node:node-3\" cannot get resource \"persistentvolumeclaims\" in API group \"\" in the namespace \"default\": no relationship found between node 'node-3' and this object" pod="default/web-0" podUID="2103"
kubelet exited (1); restarting in 1s
I1128 13:20:36.870461      31 reconciler_common.go:251] "operationExecutor.VerifyControllerAttachedVolume started for volume \"web-data\" (UniqueName: \"kubernetes.io/csi/attach.kubefence.test^web-data\") pod \"web-0\" (UID: \"2103\") " pod="default/web-0"
`

// A start the authorizer let through: the status manager's refused read alone is no
// refusal of the claim.
const clearLog = `E1128 13:27:40.251358      33 status_manager.go:1164] "Failed to get status for pod" err="pods \"web-0\" is forbidden: User \"system:node:node-3\" cannot get resource \"pods\" in API group \"\" in the namespace \"default\": no relationship found between node 'node-3' and this object" podUID="d82e" pod="default/web-0"
I1128 13:27:40.335349      33 reconciler_common.go:251] "operationExecutor.VerifyControllerAttachedVolume started for volume \"kube-api-access-b47h9\" (UniqueName: \"kubernetes.io/projected/d82e-kube-api-access-b47h9\") pod \"web-0\" (UID: \"d82e\") " pod="default/web-0"
I1128 13:27:41.141521      33 reconciler_common.go:251] "operationExecutor.VerifyControllerAttachedVolume started for volume \"web-data\" (UniqueName: \"kubernetes.io/csi/attach.kubefence.test^web-data\") pod \"web-0\" (UID: \"d82e\") " pod="default/web-0"
`

func at(clock string) time.Time {
	t, err := time.ParseInLocation("2006-01-02 15:04:05.000000", "2026-11-28 "+clock, time.Local)
	if err != nil {
		panic(err)
	}
	return t
}

func TestScanPodStart(t *testing.T) {
	for _, tc := range []struct {
		name, log                  string
		from                       time.Time
		reached, verified, refused time.Time
	}{
		{"refused", refusedLog, at("13:20:15.000000"), at("13:20:16.894938"), at("13:20:36.870461"), at("13:20:16.894938")},
		{"let through", clearLog, at("13:27:39.000000"), at("13:27:40.251358"), at("13:27:41.141521"), time.Time{}},
	} {
		ps, err := scanPodStart(bufio.NewScanner(strings.NewReader(tc.log)), "default/web-0", "web-data", tc.from)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if !ps.Reached.Equal(tc.reached) || !ps.Verified.Equal(tc.verified) || !ps.Refused.Equal(tc.refused) {
			t.Errorf("%s: reached %s, verified %s, refused %s; want %s, %s, %s", tc.name,
				ps.Reached, ps.Verified, ps.Refused, tc.reached, tc.verified, tc.refused)
		}
	}
	// A volume never verified since from is an error that says which.
	_, err := scanPodStart(bufio.NewScanner(strings.NewReader(clearLog)), "default/web-0", "web-data", at("13:27:42.000000"))
	if err == nil || !strings.Contains(err.Error(), "no line of default/web-0 verifying volume web-data") {
		t.Errorf("nothing after from: err %v, want one naming the pod and volume", err)
	}
}

// TestKlogTime: klog's lines carry no year; the year is the one that keeps a line within
// half a year of the time it is read near, also across a new year.
func TestKlogTime(t *testing.T) {
	line := func(stamp string) string { return "I" + stamp + "      31 kubelet.go:1] \"x\"" }
	near := time.Date(2027, 1, 1, 0, 0, 5, 0, time.Local)
	for _, tc := range []struct {
		stamp string
		want  time.Time
	}{
		{"1231 23:59:59.500000", time.Date(2026, 12, 31, 23, 59, 59, 500000000, time.Local)},
		{"0101 00:00:06.000000", time.Date(2027, 1, 1, 0, 0, 6, 0, time.Local)},
	} {
		got, ok := klogTime(line(tc.stamp), near)
		if !ok || !got.Equal(tc.want) {
			t.Errorf("%s near %s: %s (%t), want %s", tc.stamp, near, got, ok, tc.want)
		}
	}
	for _, bad := range []string{"kubelet exited (1); restarting in 1s", "I1128 13:20", "X1128 13:20:36.870461 x"} {
		if _, ok := klogTime(bad, near); ok {
			t.Errorf("%q read as a klog line", bad)
		}
	}
}
