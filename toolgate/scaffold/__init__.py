"""`toolgate release init NAME`: a new release package of one read and one write tool, and the project
around it."""
