//! The features oracle ([`reference::features`]) against PyTorch in float64: the answers of
//! `reference/peer/features_f64.py`, a separate implementation written from FlashAttention-2's
//! conventions, stored in `tests/data/features_f64.txt` with the inputs they came from (rerun
//! the script to remake them: its docstring says how). Both sides compute in f64 from the same
//! f32 inputs, so they agree to a few units of f64 rounding.

use std::collections::HashMap;

use ndarray::Array4;
use reference::AttentionOptions;
use reference::features::{self, Dropout, Features, Window};

/// One case of the file: its lines by their first word.
struct Case {
    name: String,
    fields: HashMap<String, Vec<String>>,
}

impl Case {
    fn words(&self, key: &str) -> &[String] {
        self.fields.get(key).unwrap_or_else(|| panic!("{}: no `{key}` line", self.name))
    }

    fn numbers(&self, key: &str) -> Vec<f64> {
        let parse = |w: &String| if w == "-inf" { f64::NEG_INFINITY } else { w.parse().unwrap() };
        self.words(key).iter().map(parse).collect()
    }

    fn sizes(&self) -> [usize; 5] {
        let n: Vec<usize> = self.words("shape").iter().map(|w| w.parse().unwrap()).collect();
        [n[0], n[1], n[2], n[3], n[4]]
    }

    fn tensor(&self, key: &str, rows: usize) -> Array4<f32> {
        let [b, h, _, _, d] = self.sizes();
        let values = self.numbers(key).into_iter().map(|x| x as f32).collect();
        Array4::from_shape_vec((b, h, rows, d), values).unwrap()
    }

    fn options(&self) -> AttentionOptions {
        let scale = self.numbers("scale")[0] as f32;
        AttentionOptions { scale: Some(scale), causal: self.words("causal")[0] == "1" }
    }

    fn features(&self) -> Features {
        let side = |w: &String| w.parse::<i64>().ok().filter(|&x| x >= 0).map(|x| x as usize);
        let window = self.words("window");
        let alibi = self.words("alibi");
        let softcap = self.numbers("softcap")[0] as f32;
        let dropout = self.words("dropout");
        let p: f32 = dropout[0].parse().unwrap();
        Features {
            window: Window::new(side(&window[0]), side(&window[1])),
            alibi_slopes: (alibi[0] != "none")
                .then(|| alibi.iter().map(|w| w.parse().unwrap()).collect()),
            softcap: (softcap > 0.0).then_some(softcap),
            dropout: (p > 0.0).then(|| Dropout { p, seed: dropout[1].parse().unwrap() }),
        }
    }
}

fn cases() -> Vec<Case> {
    let text = include_str!("data/features_f64.txt");
    let mut cases: Vec<Case> = Vec::new();
    for line in text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
        let mut words = line.split_whitespace().map(String::from);
        let key = words.next().unwrap();
        if key == "case" {
            cases.push(Case { name: words.next().unwrap(), fields: HashMap::new() });
        } else {
            cases.last_mut().expect("a `case` line first").fields.insert(key, words.collect());
        }
    }
    cases
}

fn assert_close(case: &str, what: &str, ours: impl Iterator<Item = f64>, theirs: &[f64]) {
    let mut count = 0;
    for (index, (a, &b)) in ours.zip(theirs).enumerate() {
        let agree = a == b || (a - b).abs() <= 1e-12 * (1.0 + b.abs());
        assert!(agree, "{case}: {what}[{index}] is {a}, PyTorch float64 gives {b}");
        count += 1;
    }
    assert_eq!(
        count,
        theirs.len(),
        "{case}: {what} has {count} elements, the file {}",
        theirs.len()
    );
}

#[test]
fn every_feature_agrees_with_pytorch_in_float64() {
    let cases = cases();
    let names: Vec<&str> = cases.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "window",
            "window_causal",
            "window_empty_rows",
            "alibi",
            "alibi_causal",
            "softcap",
            "dropout",
            "everything"
        ]
    );
    for case in &cases {
        let [_, _, q_len, kv_len, _] = case.sizes();
        let (q, k, v) =
            (case.tensor("q", q_len), case.tensor("k", kv_len), case.tensor("v", kv_len));
        let d_o = case.tensor("do", q_len);
        let (options, features) = (case.options(), case.features());
        let out = features::attention(&q, &k, &v, &options, &features).unwrap();
        assert_close(&case.name, "O", out.o.iter().copied(), &case.numbers("o"));
        assert_close(&case.name, "L", out.lse.iter().copied(), &case.numbers("lse"));
        let grads = features::attention_backward(&q, &k, &v, &options, &features, &d_o).unwrap();
        assert_close(&case.name, "dQ", grads.dq.iter().copied(), &case.numbers("dq"));
        assert_close(&case.name, "dK", grads.dk.iter().copied(), &case.numbers("dk"));
        assert_close(&case.name, "dV", grads.dv.iter().copied(), &case.numbers("dv"));
    }
}
