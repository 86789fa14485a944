"""Runs a child process (subdp, mpirun, the PyTorch peer) so that a stop signal to the script
ends the child too: with plain subprocess.run, SIGTERM to a benchmark script left subdp
training as an orphan, holding the cores and its checkpoint folder's lock."""
import signal
import subprocess
import threading

KILL_AFTER_S = 15  # between SIGTERM to the child and SIGKILL
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def run(cmd, check=False, capture_output=False, **kwargs):
    """subprocess.run(cmd, check=, capture_output=, **kwargs) (Popen's keyword arguments: cwd,
    env, stdout, text, ...), except that SIGTERM, SIGINT or SIGHUP to this process first ends
    the child (SIGTERM, then SIGKILL after KILL_AFTER_S seconds; mpirun passes it to its ranks)
    and then exits with 128 + the signal. Raises subprocess.CalledProcessError as
    subprocess.run does."""
    if capture_output:
        kwargs.update(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc = subprocess.Popen(cmd, **kwargs)
    stopped = []

    # The handler only starts the child's end: the wait it interrupted reaps the child (a wait
    # inside the handler would deadlock on Popen's lock, which the interrupted wait holds).
    def stop(signum, _frame):
        if stopped:
            return
        stopped.append(signum)
        proc.terminate()
        timer = threading.Timer(KILL_AFTER_S, proc.kill)
        timer.daemon = True
        timer.start()

    previous = {s: signal.signal(s, stop) for s in STOP_SIGNALS}
    try:
        out, err = proc.communicate()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    if stopped:
        raise SystemExit(128 + stopped[0])
    if check and proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, cmd, out, err)
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def end(proc):
    """Ends a child from the main flow (not a signal handler): SIGTERM (mpirun passes it to its
    ranks, so no orphan holds the cores), then SIGKILL if it is still there after KILL_AFTER_S
    seconds; reaped either way."""
    proc.terminate()
    try:
        proc.wait(timeout=KILL_AFTER_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def main_exits_cleanly(name, main):
    """Calls main() and returns its exit status; a child that failed (CalledProcessError, its own
    message already on stderr) ends the script with one line naming the command, not a
    traceback."""
    try:
        return main()
    except subprocess.CalledProcessError as e:
        cmd = " ".join(str(c) for c in e.cmd)
        raise SystemExit(f"{name}: {cmd} failed (exit {e.returncode}); its message is above")
