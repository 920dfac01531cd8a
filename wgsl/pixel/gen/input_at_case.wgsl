        // input {{K}}
        case {{K}}u: { return x{{K}}(c); }
