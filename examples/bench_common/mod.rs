//! Shared by the `*_bench` examples (`scripts/bench.sh`): repeated-run statistics, one figure's
//! JSON shape, the parts file each example writes and `bench_report` merges, the table, and
//! the peak RSS of a child process. Not an example itself (a directory without `main.rs`).
#![allow(dead_code)]

use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;

/// Summary of repeated measurements: median with its spread.
#[derive(Debug, Clone, PartialEq)]
pub struct Stats {
    /// Number of samples.
    pub n: usize,
    /// Median.
    pub median: f64,
    /// 25th percentile (linear interpolation).
    pub p25: f64,
    /// 75th percentile.
    pub p75: f64,
    /// Smallest sample.
    pub min: f64,
    /// Largest sample.
    pub max: f64,
}

impl Stats {
    /// Statistics of `samples` (must not be empty).
    pub fn of(samples: &[f64]) -> Stats {
        assert!(!samples.is_empty(), "no samples");
        let mut v = samples.to_vec();
        v.sort_by(|a, b| a.total_cmp(b));
        let q = |p: f64| {
            let pos = p * (v.len() - 1) as f64;
            let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
            v[lo] + (v[hi] - v[lo]) * (pos - lo as f64)
        };
        Stats {
            n: v.len(),
            median: q(0.5),
            p25: q(0.25),
            p75: q(0.75),
            min: v[0],
            max: v[v.len() - 1],
        }
    }

    fn json(&self) -> Value {
        json!({"n": self.n, "median": self.median, "p25": self.p25, "p75": self.p75,
               "min": self.min, "max": self.max})
    }

    fn from_json(v: &Value) -> Option<Stats> {
        let f = |k: &str| v.get(k).and_then(Value::as_f64);
        Some(Stats {
            n: v.get("n")?.as_u64()? as usize,
            median: f("median")?,
            p25: f("p25")?,
            p75: f("p75")?,
            min: f("min")?,
            max: f("max")?,
        })
    }
}

/// One line of the table: a measured value and, where it compares, a baseline measured in the
/// same run and the ratio of the medians.
#[derive(Debug, Clone)]
pub struct Figure {
    /// Issue 10's number (`1`..`6`, with a letter for sub-figures and extras).
    pub id: String,
    /// What was measured.
    pub name: String,
    /// Unit of the values (`ms`, `µs`, `MiB`, `MiB/worker`).
    pub unit: String,
    /// The measurement.
    pub value: Stats,
    /// Name and measurement of the baseline.
    pub baseline: Option<(String, Stats)>,
    /// Anything a reader must know (sizes, counts).
    pub note: String,
}

impl Figure {
    /// A figure without a baseline.
    pub fn new(id: &str, name: &str, unit: &str, value: Stats) -> Figure {
        Figure {
            id: id.into(),
            name: name.into(),
            unit: unit.into(),
            value,
            baseline: None,
            note: String::new(),
        }
    }

    /// With a baseline.
    pub fn vs(mut self, name: &str, stats: Stats) -> Figure {
        self.baseline = Some((name.into(), stats));
        self
    }

    /// With a note.
    pub fn note(mut self, note: impl Into<String>) -> Figure {
        self.note = note.into();
        self
    }

    /// Median over the baseline's median.
    pub fn ratio(&self) -> Option<f64> {
        self.baseline
            .as_ref()
            .map(|(_, b)| self.value.median / b.median)
    }

    /// The figure as JSON.
    pub fn json(&self) -> Value {
        json!({
            "id": self.id, "figure": self.name, "unit": self.unit, "value": self.value.json(),
            "baseline": self.baseline.as_ref().map(|(n, s)| json!({"name": n, "value": s.json()})),
            "ratio": self.ratio(), "note": self.note,
        })
    }

    /// Parses [`Figure::json`]'s output.
    pub fn from_json(v: &Value) -> Option<Figure> {
        let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
        let baseline = match v.get("baseline") {
            Some(Value::Object(b)) => Some((
                b.get("name")?.as_str()?.to_string(),
                Stats::from_json(b.get("value")?)?,
            )),
            _ => None,
        };
        Some(Figure {
            id: s("id")?,
            name: s("figure")?,
            unit: s("unit")?,
            value: Stats::from_json(v.get("value")?)?,
            baseline,
            note: s("note").unwrap_or_default(),
        })
    }
}

/// Milliseconds of a duration.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Writes `figures` as one part file (`{"source": …, "figures": […]}`).
pub fn write_part(path: &Path, source: &str, extra: Value, figures: &[Figure]) {
    let doc = json!({
        "source": source, "extra": extra,
        "figures": figures.iter().map(Figure::json).collect::<Vec<_>>(),
    });
    std::fs::write(path, serde_json::to_string_pretty(&doc).unwrap() + "\n")
        .unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
}

/// Reads a part file.
pub fn read_part(path: &Path) -> (Value, Vec<Figure>) {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let doc: Value = serde_json::from_str(&text).expect("part JSON");
    let figures = doc["figures"]
        .as_array()
        .expect("figures")
        .iter()
        .map(|f| Figure::from_json(f).expect("figure"))
        .collect();
    (doc, figures)
}

fn num(v: f64) -> String {
    if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// Prints `figures` as a table: median, spread (p25–p75), baseline, ratio of the medians.
pub fn print_table(figures: &[Figure]) {
    println!(
        "{:<4} {:<52} {:>14} {:>17}   {:<34} {:>10} {:>8}",
        "#", "figure", "median", "p25–p75", "baseline (same run)", "median", "ratio"
    );
    for f in figures {
        let (bname, bmed) = match &f.baseline {
            Some((n, s)) => (n.clone(), format!("{} {}", num(s.median), f.unit)),
            None => (String::from("—"), String::new()),
        };
        let ratio = f.ratio().map(|r| format!("{r:.2}x")).unwrap_or_default();
        println!(
            "{:<4} {:<52} {:>14} {:>17}   {:<34} {:>10} {:>8}",
            f.id,
            f.name,
            format!("{} {}", num(f.value.median), f.unit),
            format!("{}–{}", num(f.value.p25), num(f.value.p75)),
            bname,
            bmed,
            ratio
        );
        if !f.note.is_empty() {
            println!("{:<4} {}", "", f.note);
        }
    }
}

/// Least-squares slope of `y` over `x`.
pub fn slope(x: &[f64], y: &[f64]) -> f64 {
    let n = x.len() as f64;
    let (mx, my) = (x.iter().sum::<f64>() / n, y.iter().sum::<f64>() / n);
    let cov: f64 = x.iter().zip(y).map(|(a, b)| (a - mx) * (b - my)).sum();
    let var: f64 = x.iter().map(|a| (a - mx) * (a - mx)).sum();
    cov / var
}

/// Waits for `child` with `wait4` and returns its exit code (`None` when killed by a signal)
/// and its peak resident set size in KiB (`ru_maxrss`). The child's stdout/stderr must not be
/// pipes this process has to drain.
pub fn wait_with_peak_rss(child: std::process::Child) -> (Option<i32>, u64) {
    use nix::libc;
    let pid = child.id() as libc::pid_t;
    let mut status: libc::c_int = 0;
    // SAFETY: plain syscall on our own child; `rusage` is a POD struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(r, pid, "wait4: {}", std::io::Error::last_os_error());
    let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
    (code, usage.ru_maxrss as u64)
}
