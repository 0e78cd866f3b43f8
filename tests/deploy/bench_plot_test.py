#!/usr/bin/env python3
"""deploy/bench_plot.py on small CSVs: the PNGs decode (with the little reader below) to the
expected size and hold every series' color inside the plot area; repeated rows are merged as
bench_report.py merges them (tokens/s: the harmonic mean);
the ticks land on 1/2/5 x 10^k; bad input exits 2 without a traceback.

Usage: python3 tests/deploy/bench_plot_test.py [ROOT]   (ROOT: the repository, as from CTest)
"""
import contextlib
import importlib.util
import io
import os
import struct
import subprocess
import sys
import tempfile
import unittest
import zlib

ROOT = (sys.argv[1] if len(sys.argv) > 1 else
        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SCRIPT = os.path.join(ROOT, "deploy", "bench_plot.py")
sys.dont_write_bytecode = True  # no __pycache__ in deploy/
_spec = importlib.util.spec_from_file_location("bench_plot", SCRIPT)
bp = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bp)

GRID_HEADER = ("policy,layers,batch,context,steps,tokens_per_s,step_ms,gpu_attention_ms,"
               "cpu_attention_ms,gpu_expert_wait_ms,cpu_expert_ms,target_cpu_share,"
               "placed_cpu_share,optimal_cpu_share,bound_attention_ms\n")
TIMELINE_HEADER = ("policy,round,step,unix_s,step_ms,gpu_attention_ms,cpu_attention_ms,"
                   "cpu_expert_ms,target_cpu_share,placed_cpu_share,optimal_cpu_share,batch,"
                   "context\n")


def grid_row(policy, batch, context, tokens_per_s, step_ms):
    return f"{policy},4,{batch},{context},8,{tokens_per_s},{step_ms},0,0,0,0,0.5,0.5,0.5,0\n"


def read_png(path):
    """(width, height, rows of RGB bytes) of an 8-bit RGB PNG whose rows all use filter 0."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "no PNG signature"
    pos, idat, width = 8, b"", None
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos:pos + 4])
        tag, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
        (crc,) = struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])
        assert crc == zlib.crc32(tag + body) & 0xFFFFFFFF, f"bad CRC in {tag}"
        pos += 12 + n
        if tag == b"IHDR":
            width, height, depth, color_type = struct.unpack(">IIBB", body[:10])
            assert (depth, color_type) == (8, 2), "not 8-bit RGB"
        elif tag == b"IDAT":
            idat += body
        elif tag == b"IEND":
            break
    raw = zlib.decompress(idat)
    stride = width * 3 + 1
    assert len(raw) == stride * height, "IDAT size does not match IHDR"
    rows = []
    for y in range(height):
        assert raw[y * stride] == 0, f"row {y}: filter {raw[y * stride]}, expected 0"
        rows.append(raw[y * stride + 1:(y + 1) * stride])
    return width, height, rows


def count_color(rows, color, x_end):
    """Pixels of exactly `color` left of x_end: the plot area, not the legend on the right."""
    target = bytes(color)
    return sum(1 for row in rows for x in range(0, x_end * 3, 3) if row[x:x + 3] == target)


class BenchPlotTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def write(self, name, text):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def run_script(self, *args):
        return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)

    def grid_csv(self):
        rows = [GRID_HEADER]
        for batch in (4, 32):
            for context, ws, ta, ca in ((2048, 100, 120, 90), (8192, 90, 60, 70),
                                        (32768, 80, 40, 50)):
                rows.append(grid_row("transfer-all", batch, context, ta, 1e3 * batch / ta))
                rows.append(grid_row("writescope", batch, context, ws, 1e3 * batch / ws))
                rows.append(grid_row("cpu-all", batch, context, ca, 1e3 * batch / ca))
        # Two more writescope runs of one point: 100, 110 and 120 tokens/s, steps of 4000/100,
        # 4000/110 and 4000/120 ms.
        rows.append(grid_row("writescope", 4, 2048, 110, 1e3 * 4 / 110))
        rows.append(grid_row("writescope", 4, 2048, 120, 1e3 * 4 / 120))
        return self.write("grid.csv", "".join(rows))

    def test_merges_repeated_rows(self):
        records = bp.load_grid(self.grid_csv())
        point = [r for r in records
                 if (r["policy"], r["batch"], r["context"]) == ("writescope", 4, 2048)]
        self.assertEqual(len(point), 1)
        # As bench_report.py merges them: the throughput of all three runs' work (equal in
        # each) is the harmonic mean of their tokens/s, the batch over the mean step.
        steps = [1e3 * 4 / t for t in (100, 110, 120)]
        self.assertAlmostEqual(point[0]["tokens_per_s"], 3 / (1 / 100 + 1 / 110 + 1 / 120))
        self.assertAlmostEqual(point[0]["step_ms"], sum(steps) / 3)
        self.assertAlmostEqual(point[0]["tokens_per_s"], 1e3 * 4 / point[0]["step_ms"])
        self.assertEqual(point[0]["runs"], 3)
        self.assertEqual(len(records), 2 * 3 * 3)

    def test_nice_ticks(self):
        self.assertEqual(bp.nice_ticks(0, 0.97), [0.0, 0.2, 0.4, 0.6, 0.8, 1.0])
        self.assertEqual(bp.nice_ticks(3, 470), [0, 100, 200, 300, 400, 500])
        self.assertEqual(bp.nice_ticks(0, 151.178), [0, 50, 100, 150, 200])
        self.assertEqual(bp.nice_ticks(0, 8), [0, 2, 4, 6, 8])
        self.assertEqual(bp.nice_ticks(-3, 7), [-4, -2, 0, 2, 4, 6, 8])
        self.assertEqual(bp.nice_ticks(0, 123, 8), [0, 20, 40, 60, 80, 100, 120, 140])
        flat = bp.nice_ticks(5, 5)  # a flat series still gets an axis around it
        self.assertTrue(flat[0] < 5 < flat[-1], flat)
        self.assertEqual(bp.tick_label(0.6, [0.0, 0.2]), "0.6")
        self.assertEqual(bp.tick_label(300, [0, 100]), "300")

    def test_grid_pngs(self):
        records = bp.load_grid(self.grid_csv())
        paths = bp.render_grid(records, "g", self.dir)
        self.assertEqual([os.path.basename(p) for p in paths], [
            "g-batch4-throughput.png", "g-batch4-speedup.png",
            "g-batch32-throughput.png", "g-batch32-speedup.png"])
        colors = bp.policy_colors(bp.order_policies(r["policy"] for r in records))
        self.assertEqual(list(colors), ["writescope", "transfer-all", "cpu-all"])
        self.assertEqual(len(set(colors.values())), 3)
        for path in paths:
            width, height, rows = read_png(path)
            self.assertEqual((width, height), (bp.W, bp.H))
            drawn = ["writescope", "transfer-all", "cpu-all"] if "throughput" in path else \
                ["transfer-all", "cpu-all"]  # the speedup chart's bars are the baselines
            for policy in drawn:
                self.assertGreater(count_color(rows, colors[policy], 600), 50,
                                   f"{path}: no {policy} pixels in the plot")

    def test_timeline_png(self):
        rows = [TIMELINE_HEADER]
        for policy, start, ms, share in (("writescope", 1764440000.0, 300, 0.25),
                                         ("monolithic", 1764440100.0, 400, 0.75)):
            t = start
            for rnd in (0, 1):
                for step in range(30):
                    t += ms / 1e3
                    rows.append(f"{policy},{rnd},{step},{t:.3f},{ms + step},1,1,1,{share},"
                                f"{share - 0.0625},0.5,32,8192\n")
        timeline = self.write("contention.csv", "".join(rows))
        events = self.write("events.csv", "policy,unix_s,event\n"
                            "writescope,1764440003.5,load start\n"
                            "monolithic,1764440106.0,load stop\n"
                            "nobody,1764440000,ignored\n")
        out = self.run_script("--timeline", timeline, "--events", events, "--label", "c",
                              "--out-dir", self.dir)
        self.assertEqual(out.returncode, 0, out.stderr)
        path = os.path.join(self.dir, "c-timeline.png")
        self.assertEqual(out.stdout.split(), [path])
        self.assertIn("nobody", out.stderr)  # the event of an unknown policy is reported
        width, height, png_rows = read_png(path)
        self.assertEqual(width, bp.W)
        self.assertGreater(height, 500)
        colors = bp.policy_colors(["writescope", "monolithic"])
        for policy in colors:
            self.assertGreater(count_color(png_rows, colors[policy], 600), 100, policy)

    def test_timeline_draws_the_attended_share_when_the_csv_has_it(self):
        # Newer benches add read_cpu_share: a dotted line more, in the policy's color.
        pixels = {}
        for with_read in (False, True):
            header = TIMELINE_HEADER.rstrip("\n") + (",read_cpu_share,explore\n" if with_read else "\n")
            rows, t = [header], 1764440000.0
            for step in range(60):
                t += 0.1
                extra = f",{0.05 if step % 2 else 0.1},0" if with_read else ""
                rows.append(f"writescope,0,{step},{t:.3f},100,1,1,1,0.6,0.6,0.5,32,8192{extra}\n")
            label = f"r{int(with_read)}"
            out = self.run_script("--timeline", self.write(f"{label}.csv", "".join(rows)),
                                  "--label", label, "--out-dir", self.dir)
            self.assertEqual(out.returncode, 0, out.stderr)
            _, height, png_rows = read_png(os.path.join(self.dir, f"{label}-timeline.png"))
            color = bp.policy_colors(["writescope"])["writescope"]
            # The share panel's lowest 40 rows (shares up to ~0.23; its axis ends 80 rows
            # above the image's bottom): the target and placed shares (0.6) are above them.
            bottom = height - 80
            pixels[with_read] = count_color(png_rows[bottom - 40:bottom - 1], color, 600)
        self.assertEqual(pixels[False], 0)
        self.assertGreater(pixels[True], 50)

    def test_command_line_grid(self):
        grid = self.grid_csv()
        out = self.run_script("--grid", grid, "--label", "x", "--out-dir",
                              os.path.join(self.dir, "new"))
        self.assertEqual(out.returncode, 0, out.stderr)
        lines = out.stdout.split()
        self.assertEqual(len(lines), 4)
        for line in lines:
            self.assertTrue(os.path.basename(line).startswith("x-batch"), line)
            self.assertTrue(os.path.isfile(line), line)

    def assert_bad_input(self, args, message):
        out = self.run_script(*args, "--out-dir", self.dir)
        self.assertEqual(out.returncode, 2, out.stderr)
        self.assertIn(message, out.stderr)
        self.assertNotIn("Traceback", out.stderr)
        self.assertEqual(out.stdout, "")

    def test_bad_input_exits_2(self):
        no_tps = self.write("no_tps.csv", "policy,batch,context,step_ms\nwritescope,4,2048,30\n")
        self.assert_bad_input(["--grid", no_tps], "missing column(s) tokens_per_s")
        self.assert_bad_input(["--grid", os.path.join(self.dir, "absent.csv")], "no such file")
        self.assert_bad_input(["--grid", self.write("header.csv", GRID_HEADER)], "no data rows")
        self.assert_bad_input(["--grid", self.write("empty.csv", "")], "empty file")
        self.assert_bad_input(["--grid", self.write("nan.csv", GRID_HEADER + grid_row(
            "writescope", 4, 2048, "fast", 30))], "tokens_per_s: not a number")
        self.assert_bad_input(["--grid", self.write("zero.csv", GRID_HEADER + grid_row(
            "writescope", 4, 2048, 0, 30))], "tokens_per_s: not above 0")
        self.assert_bad_input(["--timeline", self.write("tl.csv", "policy,round,step\n")],
                              "missing column(s) unix_s")
        self.assertFalse([n for n in os.listdir(self.dir) if n.endswith(".png")])

    def test_run18_grid(self):
        grid = os.path.join(ROOT, "docs", "runs", "h200-run18-bench-grid.csv")
        if not os.path.isfile(grid):
            self.skipTest(f"{grid} is absent")
        with contextlib.redirect_stdout(io.StringIO()) as printed:
            self.assertEqual(bp.main(["--grid", grid, "--out-dir", self.dir]), 0)
        self.assertEqual(len(printed.getvalue().split()), 4)
        names = sorted(n for n in os.listdir(self.dir) if n.endswith(".png"))
        self.assertEqual(names, [f"h200-run18-bench-grid-batch{b}-{kind}.png"
                                 for b in (32, 4) for kind in ("speedup", "throughput")])
        for name in names:
            self.assertEqual(read_png(os.path.join(self.dir, name))[:2], (bp.W, bp.H))


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
