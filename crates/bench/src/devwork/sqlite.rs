//! The SQLite step of `uvfs bench devwork`: a script for the `sqlite3`
//! shell (a WAL database, a few thousand inserts in transactions, an
//! update, a delete and some queries) and the output it must print, both
//! generated from a seed, so the step checks what the database holds.

use super::tree::Rng;

/// Rows inserted per transaction.
pub const ROWS_PER_TXN: usize = 100;

/// A script and what `sqlite3` prints running it.
pub struct Script {
    pub sql: String,
    pub expected: String,
}

/// The script with `txns` transactions of [`ROWS_PER_TXN`] inserts.
pub fn script(txns: usize, seed: u64) -> Script {
    let mut rng = Rng::new(seed);
    let mut sql = String::from(
        "PRAGMA journal_mode=WAL;\n\
         CREATE TABLE item(id INTEGER PRIMARY KEY, name TEXT NOT NULL, n INTEGER NOT NULL, body TEXT);\n\
         CREATE INDEX item_n ON item(n);\n",
    );
    let mut expected = String::from("wal\n");
    // (id, name, n) of every row, as the database will hold them.
    let mut rows: Vec<(u64, String, u64)> = Vec::with_capacity(txns * ROWS_PER_TXN);
    for t in 0..txns {
        sql.push_str("BEGIN;\n");
        for _ in 0..ROWS_PER_TXN {
            let id = rows.len() as u64 + 1;
            let name = format!("item-{id}-{:x}", rng.next() & 0xffff);
            let n = rng.below(1000);
            let body: String = (0..100)
                .map(|_| char::from(b'a' + rng.below(26) as u8))
                .collect();
            sql.push_str(&format!(
                "INSERT INTO item(name, n, body) VALUES('{name}', {n}, '{body}');\n"
            ));
            rows.push((id, name, n));
        }
        sql.push_str("COMMIT;\n");
        // A query now and then, as an application reads what it wrote.
        if t % 10 == 9 {
            let lo = rng.below(900);
            sql.push_str(&format!(
                "SELECT count(*) FROM item WHERE n BETWEEN {lo} AND {};\n",
                lo + 99
            ));
            let c = rows
                .iter()
                .filter(|r| (lo..=lo + 99).contains(&r.2))
                .count();
            expected.push_str(&format!("{c}\n"));
        }
    }
    let totals = |rows: &[(u64, String, u64)]| {
        format!(
            "{}|{}\n",
            rows.len(),
            if rows.is_empty() {
                String::new()
            } else {
                rows.iter().map(|r| r.2).sum::<u64>().to_string()
            }
        )
    };
    sql.push_str("SELECT count(*), sum(n) FROM item;\n");
    expected.push_str(&totals(&rows));
    sql.push_str("UPDATE item SET n = n + 1 WHERE id % 10 = 0;\n");
    sql.push_str("DELETE FROM item WHERE id % 7 = 0;\n");
    for r in &mut rows {
        if r.0 % 10 == 0 {
            r.2 += 1;
        }
    }
    rows.retain(|r| r.0 % 7 != 0);
    sql.push_str("SELECT count(*), sum(n) FROM item;\n");
    expected.push_str(&totals(&rows));
    sql.push_str(
        "SELECT name FROM item WHERE n = (SELECT max(n) FROM item) ORDER BY id LIMIT 1;\n",
    );
    if let Some(max) = rows.iter().map(|r| r.2).max() {
        let first = rows.iter().find(|r| r.2 == max).map(|r| r.1.as_str());
        expected.push_str(&format!("{}\n", first.unwrap_or_default()));
    }
    sql.push_str("PRAGMA integrity_check;\n");
    expected.push_str("ok\n");
    Script { sql, expected }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::process::{Command, Stdio};

    /// The shell prints what the script expects (skipped without
    /// `sqlite3`, which scripts/install-deps.sh installs).
    #[test]
    fn sqlite3_prints_the_expected_output() {
        let s = script(12, 5);
        assert_eq!(s.sql.matches("INSERT").count(), 12 * ROWS_PER_TXN);
        let dir = std::env::temp_dir().join(format!("uvfs-devwork-sqlite-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let child = Command::new("sqlite3")
            .arg(dir.join("t.db"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn();
        let Ok(mut child) = child else {
            let _ = std::fs::remove_dir_all(&dir);
            eprintln!("skipped: no sqlite3 (scripts/install-deps.sh installs it)");
            return;
        };
        child
            .stdin
            .take()
            .unwrap()
            .write_all(s.sql.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout), s.expected);
    }
}
