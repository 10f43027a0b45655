package bmc

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Files the simulator keeps in IPMIOptions.Dir.
const (
	lanConfFile  = "lan.conf"
	emuFile      = "bmc.emu"
	chassisFile  = "chassis_control.sh"
	powerFile    = "power"
	eventsFile   = "events.log"
	passwordFile = "password"
	guidFile     = "guid"
	simLogFile   = "ipmi_sim.log"
	stateDir     = "state"
)

// Sources of power events. The chassis script writes sourceBMC, SetPower writes sourceSim.
const (
	sourceBMC = "bmc"
	sourceSim = "sim"
)

// lanConfTemplate is ipmi_sim's LAN configuration; see ipmi_lan(5).
// The user line grants admin over lanplus with every auth type ipmitool may choose.
const lanConfTemplate = `name "kubefence-sim"
set_working_mc 0x20
  startlan 1
    addr %s %d
    priv_limit admin
    allowed_auths_callback none md2 md5 straight
    allowed_auths_user none md2 md5 straight
    allowed_auths_operator none md2 md5 straight
    allowed_auths_admin none md2 md5 straight
    guid %s
  endlan
  chassis_control "%s"
user 2 true "%s" "%s" admin 10 none md2 md5 straight
`

// emuContent declares the one BMC the simulator serves. It has no sensors:
// fencing needs only chassis power.
const emuContent = `mc_setbmc 0x20
mc_add 0x20 0 no-device-sdrs 0x23 9 8 0x9f 0x1291 0xf02
sel_enable 0x20 50 0x0a
mc_enable 0x20
`

// chassisScriptTemplate is what ipmi_sim runs for chassis control. ipmi_sim calls it as
//
//	SCRIPT get power            -> must print "power:1" or "power:0"
//	SCRIPT set power 0|1        -> chassis power off / on (also "power cycle" sends "set power 0")
//	SCRIPT set reset 1          -> hard reset
//	SCRIPT set shutdown 1       -> soft (ACPI) shutdown request
//
// optionally preceded by a device name if lan.conf adds one. The power state lives in a
// file so a test reads the BMC's own state, not what a driver claims. State writes go
// through a rename so a reader never sees a half-written file; log lines are appended in
// one write each, which O_APPEND keeps whole.
const chassisScriptTemplate = `#!/bin/sh
STATE=%q
LOG=%q
IGNORE_OFF=%d
OFF_DELAY=%s
OFF_HOOK=%q
log() { printf '%%s %%s %s\n' "$(date +%%s.%%N)" "$1" >> "$LOG"; }
setpower() { printf '%%s\n' "$1" > "$STATE.tmp.$$" && mv -f "$STATE.tmp.$$" "$STATE"; }
# The hook cuts the machine's power before the BMC reports it off.
poweroff() { if [ -n "$OFF_HOOK" ]; then "$OFF_HOOK" || { log off-failed; exit 1; }; fi; setpower 0; log off; }
case "$1" in get|set) ;; *) shift ;; esac
op=$1
shift
case "$op" in
get)
	for p in "$@"; do
		case "$p" in
		power) printf 'power:%%s\n' "$(cat "$STATE")" ;;
		esac
	done
	;;
set)
	while [ $# -ge 2 ]; do
		case "$1" in
		power)
			if [ "$2" = 0 ]; then
				if [ "$IGNORE_OFF" = 1 ]; then
					log ignored-off
				elif [ "$OFF_DELAY" != 0 ]; then
					# A slow BMC: it acknowledges now and cuts power later.
					log off-requested
					(sleep "$OFF_DELAY"; poweroff) </dev/null >/dev/null 2>&1 &
				else
					poweroff
				fi
			else
				setpower 1; log on
			fi
			;;
		reset) log reset ;;
		shutdown) log shutdown ;;
		esac
		shift 2
	done
	;;
*)
	echo "unknown operation: $op"
	exit 1
	;;
esac
exit 0
`

// offDelay formats a delay for sleep(1); "0" turns the delay off.
func offDelay(d time.Duration) string {
	if d <= 0 {
		return "0"
	}
	return strconv.FormatFloat(d.Seconds(), 'f', 3, 64)
}

// writeConfig writes every file ipmi_sim needs for one BMC listening on port.
// The power file is written only when absent so a restarted sim keeps its state.
func writeConfig(opts IPMIOptions, port int) error {
	if err := os.MkdirAll(filepath.Join(opts.Dir, stateDir), 0o700); err != nil {
		return fmt.Errorf("create state dir: %w", err)
	}
	guid := opts.GUID
	script := filepath.Join(opts.Dir, chassisFile)
	ignore := 0
	if opts.IgnorePowerOff {
		ignore = 1
	}
	files := []struct {
		name    string
		content string
		mode    os.FileMode
	}{
		{lanConfFile, fmt.Sprintf(lanConfTemplate, opts.Address, port, guid, script, opts.User, opts.Password), 0o600},
		{emuFile, emuContent, 0o600},
		{chassisFile, fmt.Sprintf(chassisScriptTemplate,
			filepath.Join(opts.Dir, powerFile), filepath.Join(opts.Dir, eventsFile), ignore,
			offDelay(opts.OffDelay), opts.OffHook, sourceBMC), 0o700},
		// ipmitool reads the password from this file (-f) so it never shows on argv.
		{passwordFile, opts.Password, 0o600},
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(opts.Dir, f.name), []byte(f.content), f.mode); err != nil {
			return fmt.Errorf("write %s: %w", f.name, err)
		}
	}
	return nil
}

// initPower sets the initial power state unless a previous run left one.
func initPower(dir string, on bool) error {
	path := filepath.Join(dir, powerFile)
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	return writePower(dir, on)
}

// checkCredentials rejects values that lan.conf cannot quote or IPMI cannot carry.
func checkCredentials(user, password string) error {
	for name, v := range map[string]string{"user": user, "password": password} {
		if v == "" {
			return fmt.Errorf("%s is empty", name)
		}
		if strings.ContainsAny(v, "\"\\ \t\r\n") {
			return fmt.Errorf("%s contains a quote, backslash or space, which lan.conf cannot hold", name)
		}
	}
	if len(user) > 16 {
		return fmt.Errorf("user is longer than 16 bytes, the IPMI limit")
	}
	if len(password) > 20 {
		return fmt.Errorf("password is longer than 20 bytes, the IPMI v2 limit")
	}
	return nil
}

func randomGUID() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generate guid: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// keepGUID returns guid, checked, or else the one a previous run in dir kept, or else a
// random one; it keeps what it returns in dir, so that a restarted BMC is the same machine.
func keepGUID(dir, guid string) (string, error) {
	path := filepath.Join(dir, guidFile)
	guid = strings.ReplaceAll(guid, "-", "")
	if guid == "" {
		if b, err := os.ReadFile(path); err == nil {
			guid = strings.TrimSpace(string(b))
		}
	}
	if guid == "" {
		var err error
		if guid, err = randomGUID(); err != nil {
			return "", err
		}
	}
	if b, err := hex.DecodeString(guid); err != nil || len(b) != 16 {
		return "", fmt.Errorf("GUID %q is not 32 hex digits", guid)
	}
	if err := os.WriteFile(path, []byte(guid+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write %s: %w", guidFile, err)
	}
	return guid, nil
}

// uuidText writes 32 hex digits as a lower-case UUID; smbios swaps the first three
// fields' bytes, as SMBIOS stores them little-endian.
func uuidText(guid string, smbios bool) string {
	b, err := hex.DecodeString(guid)
	if err != nil || len(b) != 16 {
		return ""
	}
	if smbios {
		b[0], b[1], b[2], b[3] = b[3], b[2], b[1], b[0]
		b[4], b[5] = b[5], b[4]
		b[6], b[7] = b[7], b[6]
	}
	h := hex.EncodeToString(b)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// hostUUIDFiles are where a kubelet on this host finds what it reports as its node's
// systemUUID: the machine's SMBIOS system UUID, or on a machine without DMI (a VM or a
// container that shows none) the machine ID.
var hostUUIDFiles = []string{"/sys/class/dmi/id/product_uuid", "/etc/machine-id"}

// HostGUID is the GUID a BMC of this host would send (IPMIOptions.GUID) for the kubelets
// that run on it to match: the identity they report, in the BMC's byte order; "" when the
// host shows none, and the kubelets report none either.
func HostGUID() string {
	var raw []byte
	for _, f := range hostUUIDFiles {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if raw, err = hex.DecodeString(strings.ReplaceAll(strings.TrimSpace(string(b)), "-", "")); err == nil && len(raw) == 16 {
			break
		}
		raw = nil
	}
	if raw == nil {
		return ""
	}
	// uuidText's swap is its own inverse.
	return strings.ReplaceAll(uuidText(hex.EncodeToString(raw), true), "-", "")
}
