//! Small non-negative least-squares fits: Optimus's speed model of profiling runs and the online
//! speed estimator's model of observed progress ([`crate::estimate`]) use the same one.
//!
//! Hand-written because the systems are tiny (at most a handful of unknowns, a few hundred rows)
//! and must be deterministic and allocation-light inside every decision; a linear-algebra crate
//! would add a heavy dependency for a 5 × 5 solve.

/// Non-negative least squares for `N` unknowns by an active-set method in the manner of
/// Lawson–Hanson (drop the negative coefficients and refit, at most 10 times).
pub fn nnls<const N: usize>(x: &[[f64; N]], y: &[f64]) -> [f64; N] {
    let mut active = [true; N];
    let mut theta = [0.0; N];
    for _ in 0..10 {
        let idx: Vec<usize> = (0..N).filter(|&j| active[j]).collect();
        let sol = least_squares(x, y, &idx);
        let mut neg = false;
        theta = [0.0; N];
        for (i, &j) in idx.iter().enumerate() {
            if sol[i] < 0.0 {
                active[j] = false;
                neg = true;
            } else {
                theta[j] = sol[i];
            }
        }
        if !neg {
            break;
        }
    }
    theta
}

/// Ordinary least squares over the columns `idx` (normal equations with a tiny ridge, Gaussian
/// elimination with partial pivoting; N × N at most).
fn least_squares<const N: usize>(x: &[[f64; N]], y: &[f64], idx: &[usize]) -> Vec<f64> {
    let n = idx.len();
    let mut a = vec![vec![0.0; n + 1]; n];
    for (row, yv) in x.iter().zip(y) {
        for i in 0..n {
            for j in 0..n {
                a[i][j] += row[idx[i]] * row[idx[j]];
            }
            a[i][n] += row[idx[i]] * yv;
        }
    }
    for (i, r) in a.iter_mut().enumerate() {
        r[i] += 1e-9;
    }
    for c in 0..n {
        let piv = (c..n)
            .max_by(|&i, &j| a[i][c].abs().total_cmp(&a[j][c].abs()))
            .unwrap_or(c);
        a.swap(c, piv);
        let d = a[c][c];
        if d.abs() < 1e-15 {
            continue;
        }
        let pivot_row = a[c].clone();
        for (r, row) in a.iter_mut().enumerate() {
            if r != c {
                let f = row[c] / d;
                for (x, p) in row.iter_mut().zip(&pivot_row).skip(c) {
                    *x -= f * p;
                }
            }
        }
    }
    (0..n)
        .map(|i| {
            if a[i][i].abs() < 1e-15 {
                0.0
            } else {
                a[i][n] / a[i][i]
            }
        })
        .collect()
}
