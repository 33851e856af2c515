//! Tests of the report: figures, markdown layout and the charts' SVG.

use super::group::{GroupStats, median};
use super::svg::{LinearAxis, LogAxis, micros_label};
use super::text::{int, num, xml};
use super::*;
use crate::results::{Machine, ProcUsage, ScaleRecord, Settings, StormRecord, StormRound, VERSION};
use crate::stats::{Latency, Summary};

fn summary(ops_per_sec: f64, errors: u64, p50: u64) -> Summary {
    let ops = (ops_per_sec * 5.0) as u64;
    Summary {
        ops,
        errors,
        misses: 0,
        answered: ops + 1000,
        elapsed_s: 5.0,
        ops_per_sec,
        latency_us: Latency {
            mean: p50 as f64,
            p50,
            p90: p50 * 2,
            p99: p50 * 4,
            p999: p50 * 8,
            max: p50 * 10,
        },
        first_error: (errors > 0).then(|| "connection reset".to_string()),
    }
}

fn run(
    table: &str,
    target: &str,
    connections: usize,
    round: u32,
    ops: f64,
    errors: u64,
) -> RunRecord {
    RunRecord {
        table: table.to_string(),
        target: target.to_string(),
        connections,
        round,
        summary: summary(ops, errors, 100 * connections as u64),
        process: None,
    }
}

fn table(id: &str, title: &str, connections: &[usize]) -> TableInfo {
    TableInfo {
        id: id.to_string(),
        title: title.to_string(),
        notes: String::new(),
        settings: Settings {
            scenario: "point-select".to_string(),
            protocol: "pg".to_string(),
            mode: "prepared".to_string(),
            depth: 1,
            rate: None,
            keys: 100_000,
            duration_s: 5.0,
            warmup_s: 1.0,
        },
        connections: connections.to_vec(),
        rounds: 3,
    }
}

fn doc(title: &str, tables: Vec<TableInfo>, runs: Vec<RunRecord>) -> Results {
    Results {
        version: VERSION,
        title: title.to_string(),
        command: "sluice-bench compare bench/pg.toml".to_string(),
        started: "2026-11-24T06:10:00Z".to_string(),
        machine: Machine {
            cpus: 2,
            cpu_model: "AMD EPYC".to_string(),
            memory_kib: 24 * 1024 * 1024,
            kernel: "6.18.0".to_string(),
        },
        targets: vec!["direct".to_string(), "sluice".to_string()],
        tables,
        runs,
        scale: Vec::new(),
        storm: Vec::new(),
        failover: Vec::new(),
    }
}

/// Two tables, two targets, 3 rounds each at 1 and 16 connections; all clean.
fn clean_doc() -> Results {
    let mut runs = Vec::new();
    for (id, base) in [("pg-a", 10_000.0), ("pg-b", 20_000.0)] {
        for c in [1, 16] {
            for round in 1..=3 {
                let k = f64::from(round);
                runs.push(run(id, "direct", c, round, base * c as f64 + k, 0));
                runs.push(run(id, "sluice", c, round, 0.8 * base * c as f64 + k, 0));
            }
        }
    }
    doc(
        "PostgreSQL",
        vec![
            table("pg-a", "Table A", &[1, 16]),
            table("pg-b", "Table B", &[1, 16]),
        ],
        runs,
    )
}

fn opts() -> ReportOptions {
    ReportOptions {
        svg_link_prefix: "bench/".to_string(),
        command: "sluice-bench report results/*.json".to_string(),
        preface: String::new(),
    }
}

/// The markdown row that starts with `connections | target`.
fn row<'a>(md: &'a str, connections: &str, target: &str) -> &'a str {
    let prefix = format!("| {connections} | {target} |");
    md.lines()
        .find(|l| l.starts_with(&prefix))
        .unwrap_or_else(|| panic!("no row {prefix} in\n{md}"))
}

/// Structural checks of an SVG document.
fn assert_svg_ok(name: &str, svg: &str) {
    assert!(svg.starts_with("<svg"), "{name}");
    assert!(svg.trim_end().ends_with("</svg>"), "{name}");
    assert!(svg.contains("viewBox=\"0 0 640 360\""), "{name}");
    assert!(svg.contains("font-family=\"sans-serif\""), "{name}");
    assert_eq!(
        svg.matches("<text").count(),
        svg.matches("</text>").count(),
        "{name}"
    );
    for (i, _) in svg.match_indices('&') {
        let rest = &svg[i..];
        assert!(
            ["&amp;", "&lt;", "&gt;", "&quot;", "&apos;"]
                .iter()
                .any(|e| rest.starts_with(e)),
            "{name}: unescaped & at {i}"
        );
    }
    assert!(!svg.contains("NaN") && !svg.contains("inf"), "{name}");
}

#[test]
fn medians_of_odd_and_even_counts() {
    assert_eq!(median([3.0, 1.0, 2.0]), Some(2.0));
    assert_eq!(median([4.0, 1.0, 3.0, 2.0]), Some(2.5));
    assert_eq!(median([7.0]), Some(7.0));
    assert_eq!(median([f64::NAN, 5.0, 1.0]), Some(3.0));
    assert_eq!(median(Vec::<f64>::new()), None);
}

#[test]
fn numbers_are_formatted_with_separators() {
    assert_eq!(num(12_345.4, 0), "12,345");
    assert_eq!(num(999.5, 0), "1,000");
    assert_eq!(num(-1_234.0, 0), "-1,234");
    assert_eq!(num(1_234.56, 1), "1,234.6");
    assert_eq!(num(-0.01, 0), "0");
    assert_eq!(num(f64::NAN, 0), "—");
    assert_eq!(int(1_234_567), "1,234,567");
    assert_eq!(int(12), "12");
    assert_eq!(xml("a<&>\"b'"), "a&lt;&amp;&gt;&quot;b&apos;");
}

#[test]
fn axes_have_nice_ticks() {
    let a = LinearAxis::new(12_345.0);
    assert_eq!((a.step, a.top, a.decimals), (5_000.0, 15_000.0, 0));
    assert_eq!(a.ticks(), vec![0.0, 5_000.0, 10_000.0, 15_000.0]);
    assert_eq!(a.label(10_000.0), "10,000");
    let z = LinearAxis::new(0.0);
    assert!(z.top > 0.0 && z.step > 0.0);
    let small = LinearAxis::new(0.7);
    assert_eq!(small.decimals, 1);
    let l = LogAxis::new(120.0, 4_500.0);
    assert_eq!((l.lo, l.hi), (2, 4));
    let exact = LogAxis::new(100.0, 100.0);
    assert!(exact.lo < 2 && exact.hi >= 2, "{exact:?}");
    let bad = LogAxis::new(0.0, f64::INFINITY);
    assert!(bad.lo < bad.hi);
    assert_eq!(micros_label(2), "100 µs");
    assert_eq!(micros_label(3), "1 ms");
    assert_eq!(micros_label(4), "10 ms");
    assert_eq!(micros_label(6), "1 s");
}

#[test]
fn markdown_has_header_sections_and_rows_in_order() {
    let r = render(&[clean_doc()], &opts()).expect("renders");
    let md = &r.markdown;
    assert!(md.starts_with(
        "# Benchmarks\n\nGenerated by `sluice-bench report results/*.json` from the results \
         documents listed below; do not edit by hand."
    ));
    assert!(md.contains("[benchmarks-history.md](benchmarks-history.md)"));
    assert!(md.contains("- 2 CPUs: AMD EPYC\n- memory: 24.0 GiB\n- kernel: 6.18.0\n"));
    let pos = |s: &str| md.find(s).unwrap_or_else(|| panic!("no {s:?} in\n{md}"));
    assert!(pos("## Machine") < pos("## PostgreSQL"));
    assert!(pos("`sluice-bench compare bench/pg.toml` (started 2026-11-24T06:10:00Z)") > 0);
    assert!(pos("### Table A") < pos("### Table B"));
    assert!(md.contains(
        "point-select over PostgreSQL, prepared; closed loop; 1 request in flight per \
         connection; keys 1..=100,000; 3 rounds of 5 s after 1 s warm-up each, targets \
         alternating."
    ));
    assert!(md.contains("| connections | target | median ops/s | ratio to direct | p50 µs |"));
    let a = pos("### Table A");
    let rows: Vec<usize> = [
        ("1", "direct"),
        ("1", "sluice"),
        ("16", "direct"),
        ("16", "sluice"),
    ]
    .iter()
    .map(|(c, t)| a + md[a..].find(&format!("| {c} | {t} |")).expect("row"))
    .collect();
    assert!(rows.windows(2).all(|w| w[0] < w[1]), "{rows:?}");
    assert!(rows[3] < pos("### Table B"));
    // Medians of 10,001 / 10,002 / 10,003 and of 8,001 / 8,002 / 8,003.
    assert_eq!(
        row(md, "1", "direct"),
        "| 1 | direct | 10,002 | 1.00 | 100 | 400 | 800 | — | — | 3/3 |"
    );
    assert!(row(md, "1", "sluice").starts_with("| 1 | sluice | 8,002 | 0.80 | 100 |"));
    assert!(md.contains("![Table A: throughput](bench/pg-a-throughput.svg)\n"));
    assert!(md.contains("![Table A: latency](bench/pg-a-latency.svg)\n"));
    assert!(md.ends_with('\n') && !md.ends_with("\n\n"));
}

#[test]
fn error_rounds_refuse_ratios_but_still_count() {
    let mut d = clean_doc();
    // One failed sluice round at 1 connection, one failed direct round at 16.
    d.runs.push(run("pg-a", "sluice", 1, 4, 5_000.0, 3));
    d.runs.push(run("pg-a", "direct", 16, 4, 0.0, 0));
    let md = render(&[d], &opts()).expect("renders").markdown;
    let a = &md[md.find("### Table A").expect("A")..md.find("### Table B").expect("B")];
    assert!(row(a, "1", "direct").contains("| 1.00 |"));
    let s1 = row(a, "1", "sluice");
    assert!(s1.contains("| — (errors) |"), "{s1}");
    assert!(s1.ends_with("| 3/4 |"), "{s1}");
    // The error round is left out of the median.
    assert!(s1.contains("| 8,002 |"), "{s1}");
    let d16 = row(a, "16", "direct");
    assert!(
        d16.contains("| — (errors) |") && d16.ends_with("| 3/4 |"),
        "{d16}"
    );
    let s16 = row(a, "16", "sluice");
    assert!(
        s16.contains("| — (errors) |") && s16.ends_with("| 3/3 |"),
        "{s16}"
    );
    assert!(a.contains(
        "- sluice, 1 connection, round 4: 3 errors, 25,000 completed; first error: connection reset"
    ));
    // Table B is untouched.
    let b = &md[md.find("### Table B").expect("B")..];
    assert!(row(b, "16", "sluice").contains("| 0.80 |"));
}

#[test]
fn missing_reference_and_no_ok_run() {
    let mut d = clean_doc();
    d.runs
        .retain(|r| !(r.table == "pg-a" && r.connections == 16 && r.target == "direct"));
    d.runs
        .retain(|r| !(r.table == "pg-b" && r.connections == 16 && r.target == "sluice"));
    d.runs.push(run("pg-b", "sluice", 16, 1, 1_000.0, 2));
    let md = render(&[d], &opts()).expect("renders").markdown;
    let a = &md[md.find("### Table A").expect("A")..md.find("### Table B").expect("B")];
    assert!(!a.contains("| 16 | direct |"));
    assert!(row(a, "16", "sluice").contains("| 128,002 | — |"));
    let b = &md[md.find("### Table B").expect("B")..];
    assert_eq!(
        row(b, "16", "sluice"),
        "| 16 | sluice | — | — (errors) | — | — | — | — | — | 0/1 |"
    );
}

#[test]
fn cpu_per_thousand_answers_and_peak_rss() {
    let mut d = clean_doc();
    for (i, r) in d.runs.iter_mut().enumerate() {
        if r.target == "sluice" {
            r.summary.answered = 100_000;
            r.process = Some(ProcUsage {
                cpu_s: 0.5 + 0.1 * (i % 3) as f64,
                rss_kib: 10_240,
                peak_rss_kib: 20_480 + i as u64 * 1024,
                slow_waits: Some(i as u64 % 2),
            });
        }
    }
    let runs: Vec<&RunRecord> = d
        .runs
        .iter()
        .filter(|r| r.target == "sluice" && r.table == "pg-a" && r.connections == 1)
        .collect();
    let s = GroupStats::of(&runs);
    // cpu_s 0.5, 0.6, 0.7 over 100,000 answers: 5, 6, 7 ms per 1,000.
    let cpu = s.cpu_ms_per_1k.expect("cpu");
    assert!((cpu - 6.0).abs() < 1e-9, "{cpu}");
    let max_peak = runs
        .iter()
        .filter_map(|r| r.process.map(|p| p.peak_rss_kib))
        .max()
        .expect("peak");
    assert_eq!(s.peak_rss_mib, Some(max_peak as f64 / 1024.0));
    let slow: u64 = runs.iter().filter_map(|r| r.process?.slow_waits).sum();
    assert_eq!(s.slow_waits, Some(slow));
    let md = render(&[d], &opts()).expect("renders").markdown;
    assert!(
        md.contains("Waits for a server connection over 100 ms (all rounds): sluice at 1:"),
        "{md}"
    );
    let line = row(&md, "1", "sluice");
    assert!(
        line.contains(&format!(
            "| 6.0 | {} | 3/3 |",
            num(max_peak as f64 / 1024.0, 1)
        )),
        "{line}"
    );
    assert!(row(&md, "1", "direct").ends_with("| — | — | 3/3 |"));
}

#[test]
fn charts_for_every_table_are_well_formed() {
    let r = render(&[clean_doc()], &opts()).expect("renders");
    let names: Vec<&str> = r.charts.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "pg-a-throughput.svg",
            "pg-a-latency.svg",
            "pg-b-throughput.svg",
            "pg-b-latency.svg"
        ]
    );
    for (name, svg) in &r.charts {
        assert_svg_ok(name, svg);
    }
    let (_, thr) = &r.charts[0];
    assert!(thr.contains("client connections") && thr.contains("operations per second"));
    assert!(thr.contains(">direct</text>") && thr.contains(">sluice</text>"));
    assert_eq!(
        thr.matches("<polyline").count(),
        4,
        "two series, two legend swatches"
    );
    let (_, lat) = &r.charts[1];
    assert!(lat.contains("Table A: latency at 16 connections"));
    assert!(lat.contains(">p99.9</text>") && lat.contains(" ms</text>"));
    assert_eq!(
        lat.matches("<rect").count(),
        1 + 2 + 8,
        "background, legend, bars"
    );
}

#[test]
fn latency_chart_uses_the_largest_count_with_data() {
    let mut d = doc(
        "D",
        vec![table("t", "T", &[1, 16, 4])],
        vec![
            run("t", "direct", 1, 1, 100.0, 0),
            run("t", "direct", 4, 1, 400.0, 0),
            run("t", "direct", 16, 1, 0.0, 0),
            run("t", "sluice", 16, 1, 100.0, 5),
        ],
    );
    d.tables[0].notes = "Notes about T.".to_string();
    let r = render(&[d], &opts()).expect("renders");
    assert!(r.charts[1].1.contains("T: latency at 4 connections"));
    assert!(r.markdown.contains("\n\nNotes about T.\n\n"));
    for (name, svg) in &r.charts {
        assert_svg_ok(name, svg);
    }
    // No data at all: the charts still exist and say so.
    let empty = doc("E", vec![table("e", "E", &[1])], Vec::new());
    let r = render(&[empty], &opts()).expect("renders");
    assert_eq!(r.charts.len(), 2);
    for (name, svg) in &r.charts {
        assert_svg_ok(name, svg);
        assert!(svg.contains(">no data</text>"), "{name}");
    }
    assert!(r.markdown.contains("No runs were recorded for this table."));
}

#[test]
fn output_is_deterministic() {
    let mut d = clean_doc();
    d.runs.push(run("pg-a", "sluice", 1, 4, 5_000.0, 3));
    let docs = [
        d,
        doc(
            "Other",
            vec![table("o", "O", &[2])],
            vec![run("o", "sluice", 2, 1, 1.0, 0)],
        ),
    ];
    let a = render(&docs, &opts()).expect("renders");
    let b = render(&docs, &opts()).expect("renders");
    assert_eq!(a.markdown, b.markdown);
    assert_eq!(a.charts, b.charts);
}

#[test]
fn free_text_is_escaped() {
    let mut d = doc(
        "Doc",
        vec![table("x", "Say <&> \"hi\"", &[1])],
        vec![
            run("x", "a|b", 1, 1, 10.0, 0),
            run("x", "direct", 1, 1, 20.0, 0),
        ],
    );
    d.targets = vec!["direct".to_string(), "a|b".to_string()];
    let r = render(&[d], &opts()).expect("renders");
    for (name, svg) in &r.charts {
        assert_svg_ok(name, svg);
        assert!(svg.contains("Say &lt;&amp;&gt; &quot;hi&quot;"), "{name}");
        assert!(!svg.contains("<&>"), "{name}");
    }
    assert!(
        r.markdown.contains("| 1 | a\\|b | 10 | 0.50 |"),
        "{}",
        r.markdown
    );
    assert!(
        r.markdown.contains("### Say \\<&\\> \"hi\"\n"),
        "{}",
        r.markdown
    );
}

#[test]
fn machines_scale_and_bad_ids() {
    let mut a = clean_doc();
    a.scale.push(ScaleRecord {
        target: "sluice".to_string(),
        protocol: "pg".to_string(),
        idle: 1000,
        active: 16,
        scenario: "ping".to_string(),
        mode: "simple".to_string(),
        rss_before_kib: 10_240,
        rss_idle_kib: 30_720,
        bytes_per_idle: 20_971.52,
        without_idle: summary(50_000.0, 0, 300),
        with_idle: summary(45_000.0, 0, 320),
    });
    let mut b = doc("MySQL", vec![table("my", "My", &[1])], Vec::new());
    b.machine.kernel = "6.19.0".to_string();
    let md = render(&[a.clone(), b.clone()], &opts())
        .expect("renders")
        .markdown;
    assert!(md.contains("**PostgreSQL** ran on:"));
    assert!(
        md.contains(
            "**MySQL** ran on:\n\n- 2 CPUs: AMD EPYC\n- memory: 24.0 GiB\n- kernel: 6.19.0"
        )
    );
    assert!(md.contains("### Connection scale"));
    assert!(md.contains(
        "| sluice | 1,000 | 16 × ping (PostgreSQL, simple) | 10.0 | 30.0 | 20,972 | 50,000 | 45,000 | 0.90 |"
    ));

    let mut dup = clean_doc();
    dup.tables[1].id = "pg-a".to_string();
    let e = render(&[dup], &opts()).expect_err("duplicate id");
    assert!(e.to_string().contains("pg-a"), "{e}");
    let mut bad = clean_doc();
    bad.tables[0].id = "../x".to_string();
    assert!(render(&[bad], &opts()).is_err());
    let e = render(&[a.clone(), a], &opts()).expect_err("same ids in two documents");
    assert!(e.to_string().contains("pg-a"), "{e}");
    assert!(render(&[], &opts()).is_err());
}

#[test]
fn login_storms_show_their_median_round() {
    let round = |seconds: f64, failed: usize, error: &str| StormRound {
        seconds,
        failed,
        first_error: error.to_string(),
        login_p50_ms: seconds * 500.0,
        login_p99_ms: seconds * 900.0,
        cpu_seconds: seconds / 2.0,
    };
    let mut a = clean_doc();
    a.storm.push(StormRecord {
        target: "sluice-tls".to_string(),
        protocol: "pg".to_string(),
        tls: true,
        clients: 10_000,
        rounds: vec![
            round(7.0, 0, ""),
            round(5.0, 0, ""),
            round(6.0, 2, "refused"),
        ],
    });
    let md = render(&[a], &opts()).expect("renders").markdown;
    assert!(md.contains("### Login storm"), "{md}");
    assert!(
        md.contains(
            "| sluice-tls (PostgreSQL, TLS) | 10,000 | 6.00 | 2 (refused) | 3,000.0 | 5,400.0 | 3.00 | 7.00, 5.00, 6.00 |"
        ),
        "{md}"
    );
}
