{ let a = r; let b = {{NAME}}; {{STEP}} }
