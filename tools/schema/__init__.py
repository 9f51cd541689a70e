"""Argument schemas as providers and reviewers see them: strict export, the walk of every declared
path, how hard they are to fill in, and positive and negative fixtures."""
