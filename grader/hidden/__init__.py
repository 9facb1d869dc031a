"""Hidden suites: the public scenarios on other inputs, judged against the reference."""
