//! Groups joined through memberships and candidacies: how many handles of the session joined
//! each group (a group is left on the backend with its last count, and re-joined after a
//! reopen while counted), and whether a join that raced a leave must be undone.

use crate::types::GroupName;
use std::collections::BTreeMap;

/// The session's join counts by group.
pub(crate) type Joined = BTreeMap<GroupName, usize>;

/// Counts `group` as joined once more.
pub(crate) fn count_join(joined: &mut Joined, group: &GroupName) {
    *joined.entry(group.clone()).or_insert(0) += 1;
}

/// Counts `group` as joined once less: whether that was its last count (the group is to be
/// left on the backend).
pub(crate) fn count_leave(joined: &mut Joined, group: &GroupName) -> bool {
    match joined.get_mut(group) {
        Some(n) if *n > 1 => {
            *n -= 1;
            false
        }
        Some(_) => {
            joined.remove(group);
            true
        }
        None => false,
    }
}

/// Whether a join of `group` that just returned is to be undone: every count was left
/// meanwhile (the leave may have reached the backend before the join).
pub(crate) fn left_meanwhile(joined: &Joined, group: &GroupName) -> bool {
    !joined.contains_key(group)
}

/// The groups a reopened session joins again.
pub(crate) fn rejoin(joined: &Joined) -> Vec<GroupName> {
    joined
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(g, _)| g.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_is_left_with_its_last_count_and_rejoined_while_counted() {
        let (g, h) = (GroupName::new("g").unwrap(), GroupName::new("h").unwrap());
        let mut joined = Joined::new();
        count_join(&mut joined, &g);
        count_join(&mut joined, &g);
        count_join(&mut joined, &h);
        assert_eq!(rejoin(&joined), vec![g.clone(), h.clone()]);
        assert!(!count_leave(&mut joined, &g));
        assert!(!left_meanwhile(&joined, &g));
        assert!(count_leave(&mut joined, &g));
        assert!(left_meanwhile(&joined, &g));
        assert!(!count_leave(&mut joined, &g), "no count left");
        assert_eq!(rejoin(&joined), vec![h]);
    }
}
