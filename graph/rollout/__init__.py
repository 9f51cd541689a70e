"""Release control at run time: routing threads between a control and a candidate bundle, pins,
shadowing, the automatic stop."""
