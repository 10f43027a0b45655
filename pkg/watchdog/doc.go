// Package watchdog arms and feeds a watchdog: a countdown outside the agent's process
// that resets the machine unless it is fed in time. It is how a node fences itself when
// no fence device answers (SBD's idea): the node agent feeds it only while the node is
// healthy and in touch with the cluster, and stops for good once the cluster wants the
// node fenced.
//
// Device is the boundary. Linux is the kernel's /dev/watchdog interface, which reads the
// driver's nowayout state (sysfs) before it opens the device and its support for the
// magic close after; Socket is an emulated device served by Emulator, for test harnesses:
// a real watchdog that is not fed resets the whole machine, so tests never open one.
// Feeder is the feeding loop and its rules: once it has stopped feeding for a fence it
// never feeds or disarms again, and it disarms on shutdown only once the agent has
// reported that it does.
package watchdog
