"""The rules: the playbooks as data (playbooks/), the judge of one rule, the search, the advice."""
