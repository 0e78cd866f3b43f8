"""The deploy tests' common end: each check is (passed, what it checks)."""
import sys


def finish(checks, *outputs):
    """Exits 1 after printing the outputs the checks read and what failed, else prints how many
    checks passed."""
    failed = [what for ok, what in checks if not ok]
    if failed:
        for output in outputs:
            print(output)
        print("FAILED: " + ", ".join(failed))
        sys.exit(1)
    print(f"ok: {len(checks)} checks")
