package proccpu

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

func TestStatFields(t *testing.T) {
	// A command with a space and a parenthesis, as a process may name itself.
	line := []byte("4242 (my (odd) cmd) S 1 4242 4242 0 -1 4194560 1 0 0 0 250 37 0 0 20 0 1 0 99 0 0\n")
	fields, err := statFields(line)
	if err != nil {
		t.Fatal(err)
	}
	if fields[0] != "4242" || fields[1] != "my (odd) cmd" || fields[3] != "1" {
		t.Errorf("pid, command, ppid = %q, %q, %q", fields[0], fields[1], fields[3])
	}
	if fields[13] != "250" || fields[14] != "37" {
		t.Errorf("utime, stime = %q, %q; want 250, 37", fields[13], fields[14])
	}
	for _, bad := range []string{"4242 S 1", "4242 (cmd) S 1 2 3"} {
		if _, err := statFields([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestSecondsAndChild(t *testing.T) {
	before, err := Seconds(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// Spin until the count moves (ticks are 10 ms); a reader that never
	// sees it move fails when the spin gives up.
	var after float64
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		if after, err = Seconds(os.Getpid()); err != nil || after > before {
			break
		}
	}
	if err != nil || after <= before {
		t.Errorf("this process's CPU stayed at %v s while it spun (last read: %v s, %v)", before, after, err)
	}
	if _, err := Seconds(-1); err == nil {
		t.Error("pid -1: no error")
	}

	if pid := Child("sleep"); pid != 0 {
		t.Fatalf("a sleep child before one was started: pid %d", pid)
	}
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if pid := Child("sleep"); pid != cmd.Process.Pid {
		t.Errorf("Child(sleep) = %d, want %d", pid, cmd.Process.Pid)
	}
}
