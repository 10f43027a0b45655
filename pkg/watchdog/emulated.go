package watchdog

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The emulated device speaks lines over a Unix socket, each answered "ok ..." or
// "error ...":
//
//	arm <seconds>   starts (or restarts) the countdown; answered "ok <seconds in force>"
//	feed            starts the countdown again
//	disarm          stops it
//
// A connection that closes without "disarm" leaves the countdown running, as a process
// that dies without the magic close leaves a kernel watchdog running.

// Socket is the agent's side of an emulated watchdog served by an Emulator.
type Socket struct {
	Path string
	conn net.Conn
	r    *bufio.Reader
}

// Arm connects to the emulator and starts its countdown.
func (s *Socket) Arm(timeout time.Duration) (time.Duration, error) {
	if s.conn != nil {
		return 0, fmt.Errorf("watchdog unix:%s: already armed", s.Path)
	}
	secs, err := seconds(timeout)
	if err != nil {
		return 0, fmt.Errorf("watchdog unix:%s: %w", s.Path, err)
	}
	conn, err := net.DialTimeout("unix", s.Path, 5*time.Second)
	if err != nil {
		return 0, fmt.Errorf("watchdog unix:%s: %w", s.Path, err)
	}
	s.conn, s.r = conn, bufio.NewReader(conn)
	reply, err := s.say("arm " + strconv.Itoa(secs))
	got, aerr := strconv.Atoi(reply)
	if err == nil && (aerr != nil || got <= 0) {
		err = fmt.Errorf("watchdog unix:%s: arm answered %q", s.Path, reply)
	}
	if err != nil {
		_ = s.conn.Close()
		s.conn = nil
		return 0, err
	}
	return time.Duration(got) * time.Second, nil
}

// Feed starts the countdown again.
func (s *Socket) Feed() error {
	if s.conn == nil {
		return fmt.Errorf("watchdog unix:%s: not armed", s.Path)
	}
	_, err := s.say("feed")
	return err
}

// Disarm stops the countdown and closes the connection.
func (s *Socket) Disarm() error {
	if s.conn == nil {
		return nil
	}
	_, err := s.say("disarm")
	err = errors.Join(err, s.conn.Close())
	s.conn = nil
	return err
}

func (s *Socket) say(line string) (string, error) {
	if err := s.conn.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		return "", fmt.Errorf("watchdog unix:%s: %w", s.Path, err)
	}
	if _, err := fmt.Fprintln(s.conn, line); err != nil {
		return "", fmt.Errorf("watchdog unix:%s: %s: %w", s.Path, line, err)
	}
	reply, err := s.r.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("watchdog unix:%s: %s: %w", s.Path, line, err)
	}
	reply = strings.TrimSpace(reply)
	if rest, ok := strings.CutPrefix(reply, "ok"); ok {
		return strings.TrimSpace(rest), nil
	}
	return "", fmt.Errorf("watchdog unix:%s: %s: %s", s.Path, line, reply)
}

// Emulator serves an emulated watchdog on a Unix socket: a countdown that, once armed and
// not fed in time, calls Expired, which is where a test harness powers the node off (kills
// every process of it). It is one device: one node's.
type Emulator struct {
	// Path is the socket's path; agents open "unix:" + Path.
	Path string
	// Expired is called, once per countdown, when it runs out.
	Expired func()

	mu       sync.Mutex
	ln       net.Listener
	timer    *time.Timer
	timeout  time.Duration
	gen      int
	expiries int
	open     map[net.Conn]bool
	conns    sync.WaitGroup
}

// Start listens on Path.
func (e *Emulator) Start() error {
	_ = os.Remove(e.Path)
	ln, err := net.Listen("unix", e.Path)
	if err != nil {
		return fmt.Errorf("watchdog emulator %s: %w", e.Path, err)
	}
	e.ln = ln
	go e.accept()
	return nil
}

// Close stops listening, drops the agents' connections and stops the countdown; it does
// not wait for it to run out.
func (e *Emulator) Close() error {
	err := e.ln.Close()
	e.mu.Lock()
	if e.timer != nil {
		e.timer.Stop()
		e.timer = nil
	}
	e.gen++
	for conn := range e.open {
		_ = conn.Close()
	}
	e.mu.Unlock()
	e.conns.Wait()
	return err
}

// Armed reports whether a countdown runs, and its timeout.
func (e *Emulator) Armed() (bool, time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.timer != nil, e.timeout
}

// Expiries is how many countdowns have run out.
func (e *Emulator) Expiries() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.expiries
}

func (e *Emulator) accept() {
	for {
		conn, err := e.ln.Accept()
		if err != nil {
			return
		}
		e.mu.Lock()
		if e.open == nil {
			e.open = map[net.Conn]bool{}
		}
		e.open[conn] = true
		e.mu.Unlock()
		e.conns.Add(1)
		go func() {
			defer e.conns.Done()
			e.serve(conn)
			e.mu.Lock()
			delete(e.open, conn)
			e.mu.Unlock()
		}()
	}
}

func (e *Emulator) serve(conn net.Conn) {
	defer conn.Close()
	sc := bufio.NewScanner(conn)
	for sc.Scan() {
		reply := e.handle(strings.Fields(sc.Text()))
		if _, err := fmt.Fprintln(conn, reply); err != nil {
			return
		}
	}
}

func (e *Emulator) handle(cmd []string) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case len(cmd) == 2 && cmd[0] == "arm":
		secs, err := strconv.Atoi(cmd[1])
		if err != nil || secs <= 0 {
			return "error bad timeout " + strconv.Quote(cmd[1])
		}
		e.timeout = time.Duration(secs) * time.Second
		e.restart()
		return "ok " + strconv.Itoa(secs)
	case len(cmd) == 1 && cmd[0] == "feed":
		if e.timer == nil {
			return "error not armed"
		}
		e.restart()
		return "ok"
	case len(cmd) == 1 && cmd[0] == "disarm":
		if e.timer != nil {
			e.timer.Stop()
			e.timer = nil
		}
		e.gen++
		return "ok"
	}
	return "error unknown command " + strconv.Quote(strings.Join(cmd, " "))
}

// restart starts the countdown again. A timer that already fired for an older countdown
// finds its generation gone and does nothing. The caller holds e.mu.
func (e *Emulator) restart() {
	if e.timer != nil {
		e.timer.Stop()
	}
	e.gen++
	gen := e.gen
	e.timer = time.AfterFunc(e.timeout, func() {
		e.mu.Lock()
		if gen != e.gen {
			e.mu.Unlock()
			return
		}
		e.timer = nil
		e.expiries++
		e.mu.Unlock()
		if e.Expired != nil {
			e.Expired()
		}
	})
}
